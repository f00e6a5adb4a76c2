// The TextMate grammar on every program of the repository (examples, tests, the shared
// conformance cases): each character that is not white space gets a scope of its own (none
// is left to the file's root scope or marked illegal), and no line ends inside an open
// region. Run by CI with the real tokenizer VS Code uses (vscode-textmate + vscode-oniguruma).
const fs = require("fs");
const path = require("path");
const assert = require("assert");
const vsctm = require("vscode-textmate");
const oniguruma = require("vscode-oniguruma");

const here = __dirname;
const repo = path.resolve(here, "..", "..", "..");

function programs(dir) {
  if (!fs.existsSync(dir)) return [];
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...programs(p));
    else if (entry.name.endsWith(".tl")) out.push(p);
  }
  return out.sort();
}

async function grammar() {
  const wasm = fs.readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm")).buffer;
  await oniguruma.loadWASM(wasm);
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (sources) => new oniguruma.OnigScanner(sources),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async () => {
      const file = path.join(here, "..", "syntaxes", "tl.tmLanguage.json");
      return vsctm.parseRawGrammar(fs.readFileSync(file, "utf8"), file);
    },
  });
  return registry.loadGrammar("source.tl");
}

// Programs that test errors hold characters and strings that are wrong on purpose.
const wrongOnPurpose = (file, text) =>
  /error|fuzz_regressions/.test(file) || /unterminated|unexpected character/.test(text);

function problems(g, file, text) {
  const found = [];
  const closed = g.tokenizeLine("", vsctm.INITIAL).ruleStack;
  let stack = vsctm.INITIAL;
  text.split("\n").forEach((line, n) => {
    const r = g.tokenizeLine(line, stack);
    for (const t of r.tokens) {
      const piece = line.slice(t.startIndex, t.endIndex);
      if (!piece.trim()) continue;
      const own = t.scopes.filter((s) => s !== "source.tl");
      if (own.length === 0) found.push(`${file}:${n + 1}: no scope for ${JSON.stringify(piece)}`);
      if (own.some((s) => s.startsWith("invalid."))) found.push(`${file}:${n + 1}: ${own.join(" ")} at ${JSON.stringify(piece)}`);
    }
    stack = r.ruleStack;
    if (!stack.equals(closed)) found.push(`${file}:${n + 1}: a region is left open at the end of the line`);
  });
  return found;
}

function scopesOf(g, line) {
  return g.tokenizeLine(line, vsctm.INITIAL).tokens.map((t) => [
    line.slice(t.startIndex, t.endIndex),
    t.scopes[t.scopes.length - 1],
  ]);
}

(async () => {
  const g = await grammar();
  const files = [
    ...programs(path.join(repo, "examples")),
    ...programs(path.join(repo, "tests")),
    ...programs(path.resolve(repo, "..", "shared", "conformance")),
  ];
  assert.ok(files.length > 100, `only ${files.length} programs found`);
  let found = [];
  for (const f of files) {
    const text = fs.readFileSync(f, "utf8");
    if (wrongOnPurpose(f, text)) continue;
    found = found.concat(problems(g, path.relative(repo, f), text));
  }
  assert.deepStrictEqual(found, []);

  // The scopes a theme colours, on one line of each kind.
  const s = Object.fromEntries(scopesOf(g, 'Anc(x, z) :- Anc(x, y), not P(y, "a\\"b"). # c'));
  assert.strictEqual(s["Anc"], "entity.name.tensor.tl");
  assert.strictEqual(s[":-"], "keyword.operator.rule.tl");
  assert.strictEqual(s["not"], "keyword.operator.logical.not.tl");
  assert.strictEqual(s['"a'], "string.quoted.double.tl");
  assert.strictEqual(s['\\"'], "constant.character.escape.tl");
  assert.strictEqual(s["# c"], "comment.line.number-sign.tl");
  const e = Object.fromEntries(scopesOf(g, "Y[i] max= softmax(W[i, j] X[j]) + 2.5e-3"));
  assert.strictEqual(e["max="], "keyword.operator.assignment.accumulate.tl");
  assert.strictEqual(e["softmax"], "support.function.builtin.tl");
  assert.strictEqual(e["2.5e-3"], "constant.numeric.tl");
  assert.strictEqual(e["i"], "variable.other.index.tl");
  const bad = scopesOf(g, "A = $");
  assert.strictEqual(bad[bad.length - 1][1], "invalid.illegal.character.tl");
  console.log(`grammar: ${files.length} programs tokenised, every character scoped`);
})().catch((e) => {
  console.error(e.message || e);
  process.exit(1);
});
