// Starts `tl lsp` for .tl files. Everything the editor shows beyond colours (diagnostics,
// hover, definitions, references, symbols, completion, signature help, formatting) comes
// from the server, so this file only says how to start it.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration("tensorLogic").get("server.path") || "tl";
  const server = { command, args: ["lsp"] };
  client = new LanguageClient(
    "tensorLogic",
    "Tensor Logic",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", language: "tl" }, { scheme: "untitled", language: "tl" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
