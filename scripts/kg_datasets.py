"""Extracts the Kinship and UMLS knowledge graphs (their standard train/valid/test splits) from
the PyKEEN wheel into examples/data/kinship/ and examples/data/umls/ for examples/kinship.tl
and examples/umls.tl. Run once; its output is committed:

    python3 scripts/kg_datasets.py [WHEEL]

Without WHEEL it downloads pykeen 1.11.1 from PyPI with `pip download --no-deps` (the wheel
ships both datasets as `pykeen/datasets/{kinships,umls}/{train,valid,test}.txt`). The files
are copied unchanged: one `head<TAB>relation<TAB>tail` triple per line, which `tl` reads as a
relation of rank 3 with symbol columns."""

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "examples" / "data"
VERSION = "1.11.1"
DATASETS = {"kinship": "kinships", "umls": "umls"}
SPLITS = ["train", "valid", "test"]

NOTES = {
    "kinship": """# Kinship (Alyawarra)

Kinship terms among 104 people of the Alyawarra, a Central Australian people, recorded by
Woodrow Denham (1971); used as a relational benchmark by Kemp et al. (AAAI 2006) and Kok &
Domingos (ICML 2007). 25 relations (`term0` … `term25`, the anonymised kinship terms; there is no `term23`), 10,686
triples.

Split and files as shipped in the PyKEEN {version} wheel (`pykeen/datasets/kinships/`; PyKEEN
is MIT licensed, https://github.com/pykeen/pykeen), extracted unchanged by
`scripts/kg_datasets.py`: train 8,544, valid 1,068, test 1,074 triples.
""",
    "umls": """# UMLS

A small slice of the Unified Medical Language System semantic network (McCray 2003): 135
biomedical concepts and 46 relations between them, 6,529 triples; used as a relational
benchmark by Kemp et al. (AAAI 2006) and Kok & Domingos (ICML 2007).

Split and files as shipped in the PyKEEN {version} wheel (`pykeen/datasets/umls/`; PyKEEN is
MIT licensed, https://github.com/pykeen/pykeen), extracted unchanged by
`scripts/kg_datasets.py`: train 5,216, valid 652, test 661 triples.
""",
}


def wheel_path():
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    tmp = Path(tempfile.mkdtemp())
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
         f"pykeen=={VERSION}", "-d", str(tmp)],
        check=True,
    )
    return next(tmp.glob("pykeen-*.whl"))


def main():
    with zipfile.ZipFile(wheel_path()) as wheel:
        for name, folder in DATASETS.items():
            out = OUT / name
            out.mkdir(parents=True, exist_ok=True)
            for split in SPLITS:
                data = wheel.read(f"pykeen/datasets/{folder}/{split}.txt")
                (out / f"{split}.tsv").write_bytes(data)
            (out / "README.md").write_text(NOTES[name].format(version=VERSION))
            print(f"wrote {out}")


if __name__ == "__main__":
    main()
