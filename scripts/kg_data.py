"""Writes the family knowledge graph of examples/kg_embeddings.tl. Run once; its output is
committed:

    python3 scripts/kg_data.py

Six family trees of three generations (each person has two or three children until the
third generation) give 60 people. The relations parent, child, grandparent, grandchild and
sibling are derived from the trees; a seeded 15% of all facts is held out, the rest trains.
kg_generation.tsv gives each person's generation (0, 1, 2), which no model is trained on."""

import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "examples" / "data"


def main():
    rng = random.Random(3)
    parent = {}
    people = []
    for f in range(6):
        root = f"F{f}"
        people.append(root)
        level = [root]
        for g in range(2):
            nxt = []
            for p in level:
                for c in range(rng.choice([2, 3])):
                    child = f"{p}_{c}"
                    people.append(child)
                    parent[child] = p
                    nxt.append(child)
            level = nxt
    facts = set()
    for c, p in parent.items():
        facts.add((p, "parent", c))
        facts.add((c, "child", p))
        if p in parent:
            facts.add((parent[p], "grandparent", c))
            facts.add((c, "grandchild", parent[p]))
    for a in parent:
        for b in parent:
            if a != b and parent[a] == parent[b]:
                facts.add((a, "sibling", b))
    facts = sorted(facts)
    rng.shuffle(facts)
    held = sorted(facts[: len(facts) * 15 // 100])
    train = sorted(facts[len(facts) * 15 // 100:])
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("kg_train.tsv", train), ("kg_test.tsv", held)):
        with open(OUT / name, "w") as f:
            for x, r, y in rows:
                f.write(f"{x}\t{r}\t{y}\n")
    with open(OUT / "kg_generation.tsv", "w") as f:
        for p in people:
            f.write(f"{p}\t{p.count('_')}\n")
    print(f"{len(people)} people, {len(train)} training and {len(held)} held-out facts")


if __name__ == "__main__":
    main()
