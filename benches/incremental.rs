//! Incremental updates against evaluating from scratch, on the transitive closure of a
//! 2,000-node chain (2.0M tuples): `cargo bench --bench incremental` prints the standard
//! engine's from-scratch run, the first evaluation of incremental mode, and the time of each
//! commit: one edge inserted and removed at the chain's end, one in its middle, then 1,000
//! random forward edges inserted and removed in one commit each. Incremental mode is kept by
//! the standard engine; pass `--engine differential` for the dataflow, with `--workers N`
//! for more workers and `--processes 2` to run it as two processes over localhost TCP (the
//! second served from a thread of this one); `--quick` stops after the chain's end.
//!
//! `--andersen` measures the Andersen-style points-to analysis of `bench/datalog/run.py`
//! (100,000 facts, 1.1M derived tuples; run that script once to write them): one assignment
//! removed and inserted again, and one new assignment inserted and removed.
//!
//! `--sssp` measures single-source shortest paths (`min=`) instead, over a random graph of
//! 100,000 nodes and 400,000 edges with weights 1–99 (written to a temporary file): one
//! shortcut from the source set and removed, one random weight set and removed, then 100
//! random weights set in one commit and removed in another.

use std::time::Instant;
use tensor_logic::eval::{Cluster, Processes};
use tensor_logic::{RunOptions, Session};

const NODES: usize = 2000;

fn main() {
    let mut workers = 1usize;
    let mut quick = false;
    let mut processes = 1usize;
    let mut sssp = false;
    let mut andersen = false;
    let mut dataflow = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workers" => workers = args.next().and_then(|w| w.parse().ok()).unwrap_or(1),
            "--quick" => quick = true,
            "--sssp" => sssp = true,
            "--andersen" => andersen = true,
            "--engine" => dataflow = args.next().as_deref() == Some("differential"),
            "--processes" => processes = args.next().and_then(|w| w.parse().ok()).unwrap_or(1),
            _ => {}
        }
    }
    let dataflow = dataflow || processes > 1;
    let andersen_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/datalog/data/andersen-100k");
    let (src, base) = match (sssp, andersen) {
        (true, _) => sssp_source(),
        (_, true) => (
            std::fs::read_to_string(andersen_dir.join("bench.tl"))
                .expect("bench/datalog/run.py has written the Andersen workload"),
            andersen_dir,
        ),
        _ => (chain_source(), std::path::PathBuf::from(".")),
    };
    let load = || {
        let mut s = Session::new();
        s.load_source("bench.tl", &src, &base)
            .expect("the program parses");
        s
    };
    // Shortest paths take as many iterations as the longest of them has edges.
    let settings = tensor_logic::Settings {
        max_iters: 1000,
        ..Default::default()
    };
    let options = RunOptions {
        settings,
        ..RunOptions::default()
    };
    let mut scratch = load();
    let t = Instant::now();
    scratch.run(&options).expect("the standard engine runs");
    let from_scratch = t.elapsed().as_secs_f64();
    println!(
        "standard engine, from scratch: {:.1} ms",
        from_scratch * 1e3
    );
    let clusters = clusters(workers, processes);
    let mut others = Vec::new();
    for cluster in clusters.iter().skip(1) {
        let mut s = load();
        let (options, cluster) = (options.clone(), cluster.clone());
        others.push(std::thread::spawn(move || {
            s.serve_incremental(&options, &cluster)
                .expect("the other process serves the dataflow");
        }));
    }
    let mut inc = load();
    let t = Instant::now();
    if dataflow {
        inc.run_incremental_on(&options, &clusters[0])
            .expect("the dataflow runs");
        println!(
            "differential, first evaluation ({workers} worker{}, {processes} process{}): {:.1} ms",
            if workers == 1 { "" } else { "s" },
            if processes == 1 { "" } else { "es" },
            t.elapsed().as_secs_f64() * 1e3
        );
    } else {
        inc.run_incremental(&options)
            .expect("the standard engine runs");
        println!(
            "standard engine, first evaluation of incremental mode: {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let edge = |a: usize, b: usize| vec![a.to_string(), b.to_string()];
    let relation = match (sssp, andersen) {
        (true, _) => "W",
        (_, true) => "Assign",
        _ => "Edge",
    };
    let mut commit = |label: &str, insert: bool, rows: Vec<Vec<String>>| {
        match insert {
            true => inc.insert(relation, &rows),
            false => inc.remove(relation, &rows),
        }
        .expect("the facts fit");
        let t = Instant::now();
        let changes = inc.commit().expect("the commit runs");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (added, removed): (usize, usize) = changes
            .iter()
            .map(|c| (c.added.len(), c.removed.len()))
            .fold((0, 0), |(a, r), (x, y)| (a + x, r + y));
        println!(
            "{label}: {ms:.1} ms ({:.2}% of from scratch), +{added} -{removed} tuples",
            ms / (from_scratch * 1e3) * 100.0
        );
    };
    if andersen {
        // The first assignment of the file, removed and inserted again; then one between
        // two variables that no assignment links, inserted and removed.
        commit("remove Assign(0, 1)", false, vec![edge(0, 1)]);
        commit("insert Assign(0, 1)", true, vec![edge(0, 1)]);
        commit("insert Assign(7, 5)", true, vec![edge(7, 5)]);
        commit("remove Assign(7, 5)", false, vec![edge(7, 5)]);
        return;
    }
    if sssp {
        commit("set W(0, 99) = 1", true, vec![weighted(0, 99, 1)]);
        commit("remove W(0, 99)", false, vec![edge(0, 99)]);
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let changed: Vec<(usize, usize, u64)> = (0..100)
            .filter_map(|_| {
                let (a, b) = random_edge(&mut next, SSSP_NODES);
                (a != b).then(|| (a, b, next() % 99 + 1))
            })
            .collect();
        let (a, b, w) = changed[0];
        commit(
            &format!("set W({a}, {b}) = {w}"),
            true,
            vec![weighted(a, b, w)],
        );
        commit(&format!("remove W({a}, {b})"), false, vec![edge(a, b)]);
        let set: Vec<Vec<String>> = changed.iter().map(|&(a, b, w)| weighted(a, b, w)).collect();
        let gone: Vec<Vec<String>> = changed.iter().map(|&(a, b, _)| edge(a, b)).collect();
        commit("set 100 random weights", true, set);
        commit("remove them", false, gone);
        drop(inc);
        return;
    }
    commit(
        "insert Edge(1999, 2000)",
        true,
        vec![edge(NODES - 1, NODES)],
    );
    commit(
        "remove Edge(1999, 2000)",
        false,
        vec![edge(NODES - 1, NODES)],
    );
    if !quick {
        commit("remove Edge(1000, 1001)", false, vec![edge(1000, 1001)]);
        commit("insert Edge(1000, 1001)", true, vec![edge(1000, 1001)]);
        // Forward edges (i < j) add no path, but every one is derived again and deduplicated.
        let mut random = xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = || (random() % NODES as u64) as usize;
        let mut batch: Vec<Vec<String>> = Vec::new();
        while batch.len() < 1000 {
            let (a, b) = (next(), next());
            let e = edge(a.min(b), a.max(b));
            // Not a chain edge (removing the batch must leave the chain), not twice.
            if a.abs_diff(b) >= 2 && !batch.contains(&e) {
                batch.push(e);
            }
        }
        commit("insert 1,000 random forward edges", true, batch.clone());
        commit("remove them", false, batch);
    }
    // Process 0 ending the run ends the others.
    drop(inc);
    for other in others {
        let _ = other.join();
    }
}

/// The closure of the chain; its nodes are declared, so that an edge to the node past the
/// chain is in the domain.
fn chain_source() -> String {
    let mut src = format!(
        "N : {}\nEdge : bool[N, N]\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n",
        NODES + 1
    );
    for i in 0..NODES - 1 {
        src.push_str(&format!("Edge({i}, {}).\n", i + 1));
    }
    src
}

const SSSP_NODES: usize = 100_000;

/// Shortest paths from node 0 over random weighted edges in `w.tsv` (written to a
/// temporary folder, returned as the program's base), the nodes declared through `Dist`.
fn sssp_source() -> (String, std::path::PathBuf) {
    let dir = std::env::temp_dir().join("tl-bench-sssp");
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let mut next = xorshift(0x5151_2026_1203_0001);
    let mut edges = std::collections::BTreeMap::new();
    while edges.len() < 400_000 {
        let (a, b) = random_edge(&mut next, SSSP_NODES);
        if a != b {
            edges.insert((a, b), next() % 99 + 1);
        }
    }
    let text: String = edges
        .iter()
        .map(|((a, b), w)| format!("{a}\t{b}\t{w}\n"))
        .collect();
    std::fs::write(dir.join("w.tsv"), text).expect("the weights are written");
    let src = format!(
        "N : {SSSP_NODES}\nDist : int[N]\nW = \"w.tsv\"\nDist[y] min= W[0, y]\nDist[z] min= Dist[y] + W[y, z]\n"
    );
    (src, dir)
}

/// A seeded xorshift generator.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

fn random_edge(next: &mut impl FnMut() -> u64, nodes: usize) -> (usize, usize) {
    let a = (next() % nodes as u64) as usize;
    (a, (next() % nodes as u64) as usize)
}

fn weighted(a: usize, b: usize, w: u64) -> Vec<String> {
    vec![a.to_string(), b.to_string(), w.to_string()]
}

/// The cluster of each process: threads of this one, or `processes` over localhost ports.
fn clusters(workers: usize, processes: usize) -> Vec<Cluster> {
    if processes <= 1 {
        return vec![Cluster {
            workers,
            processes: None,
        }];
    }
    let listeners: Vec<std::net::TcpListener> = (0..processes)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    let hosts: Vec<String> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .map(|a| a.to_string())
        .collect();
    drop(listeners);
    (0..processes)
        .map(|index| Cluster {
            workers,
            processes: Some(Processes {
                index,
                hosts: hosts.clone(),
            }),
        })
        .collect()
}
