"""Cuts examples/data/shakespeare.txt (Tiny Shakespeare, public domain) into the training
windows of examples/shakespeare_lm.tl, as character ids. Run once; its output is committed:

    python3 scripts/shakespeare_data.py

Characters are numbered in sorted order (65 of them: newline, space, punctuation, digits,
letters). Window s holds characters 64s .. 64s+64 of the text, one more than the model's
context, so that position p's target is the character at p + 1 of the same row. The windows
do not overlap: one epoch reads the whole text once. Written as examples/data/shakespeare_chars.npy
(uint8, windows x 65) and the character table examples/data/shakespeare_vocab.tsv (id, then the
character's code point, so that whitespace survives the TSV)."""

from pathlib import Path
import struct

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"
CONTEXT = 64


def write_npy(path, rows, width):
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({len(rows)}, {width}), }}"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        for row in rows:
            f.write(bytes(row))


def main():
    text = (DATA / "shakespeare.txt").read_text()
    chars = sorted(set(text))
    ids = {c: i for i, c in enumerate(chars)}
    codes = [ids[c] for c in text]
    rows = [codes[s: s + CONTEXT + 1]
            for s in range(0, len(codes) - CONTEXT, CONTEXT)]
    write_npy(DATA / "shakespeare_chars.npy", rows, CONTEXT + 1)
    (DATA / "shakespeare_vocab.tsv").write_text(
        "".join(f"{i}\t{ord(c)}\n" for i, c in enumerate(chars)))
    print(f"{len(text)} characters, {len(chars)} distinct, {len(rows)} windows of {CONTEXT + 1}")


if __name__ == "__main__":
    main()
