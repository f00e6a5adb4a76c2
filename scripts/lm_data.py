"""Cuts examples/data/rhymes.txt (traditional English nursery rhymes, public domain) into the
training windows of examples/tiny_lm.tl. Run once; its output is committed:

    python3 scripts/lm_data.py

Words are split on whitespace. Window s holds words 8s .. 8s+15 as Tok(s, position, word);
Tgt(s, position, word) is the word that follows each position, the language model's target."""

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"
LENGTH, STRIDE = 16, 8


def main():
    words = (DATA / "rhymes.txt").read_text().split()
    tok, tgt = [], []
    s = 0
    for start in range(0, len(words) - LENGTH, STRIDE):
        for p in range(LENGTH):
            tok.append(f"{s}\t{p}\t{words[start + p]}")
            tgt.append(f"{s}\t{p}\t{words[start + p + 1]}")
        s += 1
    (DATA / "lm_tok.tsv").write_text("\n".join(tok) + "\n")
    (DATA / "lm_tgt.tsv").write_text("\n".join(tgt) + "\n")
    print(f"{len(words)} words, {len(set(words))} distinct, {s} windows of {LENGTH}")


if __name__ == "__main__":
    main()
