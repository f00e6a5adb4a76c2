//! `ascent-bench WORKLOAD DIR [par]`: loads DIR's TSV inputs, runs the workload's rules to
//! their fixpoint with ascent (or `ascent_par!` when `par` is given), and prints the number of
//! tuples derived. Output writing is excluded, as it is for `tl`.

use ascent::{ascent, ascent_par};
use std::path::Path;

fn pairs(dir: &Path, name: &str) -> Vec<(u32, u32)> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t').map(|s| s.trim_start_matches('N').parse::<u32>().ok());
            Some((f.next()??, f.next()??))
        })
        .collect()
}

ascent! {
    struct Tc;
    relation edge(u32, u32);
    relation path(u32, u32);
    path(x, y) <-- edge(x, y);
    path(x, z) <-- path(x, y), edge(y, z);
}

ascent_par! {
    struct TcPar;
    relation edge(u32, u32);
    relation path(u32, u32);
    path(x, y) <-- edge(x, y);
    path(x, z) <-- path(x, y), edge(y, z);
}

ascent! {
    struct Sg;
    relation parent(u32, u32);
    relation sg(u32, u32);
    sg(x, y) <-- parent(x, p), parent(y, p), if x != y;
    sg(x, y) <-- parent(x, a), sg(a, b), parent(y, b);
}

ascent_par! {
    struct SgPar;
    relation parent(u32, u32);
    relation sg(u32, u32);
    sg(x, y) <-- parent(x, p), parent(y, p), if x != y;
    sg(x, y) <-- parent(x, a), sg(a, b), parent(y, b);
}

ascent! {
    struct PointsTo;
    relation address_of(u32, u32);
    relation assign(u32, u32);
    relation load(u32, u32);
    relation store(u32, u32);
    relation points_to(u32, u32);
    points_to(y, x) <-- address_of(y, x);
    points_to(y, x) <-- assign(y, z), points_to(z, x);
    points_to(y, w) <-- load(y, x), points_to(x, z), points_to(z, w);
    points_to(z, w) <-- store(y, x), points_to(y, z), points_to(x, w);
}

ascent_par! {
    struct PointsToPar;
    relation address_of(u32, u32);
    relation assign(u32, u32);
    relation load(u32, u32);
    relation store(u32, u32);
    relation points_to(u32, u32);
    points_to(y, x) <-- address_of(y, x);
    points_to(y, x) <-- assign(y, z), points_to(z, x);
    points_to(y, w) <-- load(y, x), points_to(x, z), points_to(z, w);
    points_to(z, w) <-- store(y, x), points_to(y, z), points_to(x, w);
}

// The points-to workload: Andersen's analysis with a call graph built on the fly (direct
// calls, and indirect calls through the function pointers' points-to sets), argument and
// return flows, reachability from the entry, and the functions never reached. One rule list,
// compiled by both macros.
macro_rules! pointsto_calls {
    ($ascent:ident, $name:ident) => {
        $ascent! {
            struct $name;
            relation address_of(u32, u32);
            relation assign(u32, u32);
            relation load(u32, u32);
            relation store(u32, u32);
            relation call_site_in(u32, u32);
            relation call_direct(u32, u32);
            relation call_indirect(u32, u32);
            relation actual_arg(u32, u32, u32);
            relation formal_param(u32, u32, u32);
            relation actual_return(u32, u32);
            relation formal_return(u32, u32);
            relation func_obj(u32, u32);
            relation entry(u32);
            relation func(u32);
            relation points_to(u32, u32);
            relation call_edge(u32, u32);
            relation param(u32, u32);
            relation ret(u32, u32);
            relation reachable(u32);
            relation dead(u32);
            points_to(p, o) <-- address_of(p, o);
            points_to(p, o) <-- assign(p, q), points_to(q, o);
            points_to(p, o) <-- load(p, q), points_to(q, r), points_to(r, o);
            points_to(r, o) <-- store(p, q), points_to(p, r), points_to(q, o);
            call_edge(c, g) <-- call_direct(c, g);
            call_edge(c, g) <-- call_indirect(c, p), points_to(p, o), func_obj(g, o);
            param(p, a) <-- call_edge(c, g), actual_arg(c, i, a), formal_param(g, i, p);
            ret(r, v) <-- call_edge(c, g), actual_return(c, r), formal_return(g, v);
            points_to(p, o) <-- param(p, a), points_to(a, o);
            points_to(r, o) <-- ret(r, v), points_to(v, o);
            reachable(f) <-- entry(f);
            reachable(g) <-- reachable(f), call_site_in(c, f), call_edge(c, g);
            dead(f) <-- func(f), !reachable(f);
        }
    };
}

pointsto_calls!(ascent, PointsToCalls);
pointsto_calls!(ascent_par, PointsToCallsPar);

ascent! {
    struct Triangle;
    relation edge(u32, u32);
    relation tri(u32, u32, u32);
    tri(x, y, z) <-- edge(x, y), edge(y, z), edge(z, x);
}

ascent_par! {
    struct TrianglePar;
    relation edge(u32, u32);
    relation tri(u32, u32, u32);
    tri(x, y, z) <-- edge(x, y), edge(y, z), edge(z, x);
}

ascent! {
    struct Reach;
    relation edge(u32, u32);
    relation reach(u32);
    reach(y) <-- edge(0, y);
    reach(z) <-- reach(y), edge(y, z);
}

ascent_par! {
    struct ReachPar;
    relation edge(u32, u32);
    relation reach(u32);
    reach(y) <-- edge(0, y);
    reach(z) <-- reach(y), edge(y, z);
}

/// The rows of a TSV file of `N` integer columns.
fn rows<const N: usize>(dir: &Path, name: &str) -> Vec<[u32; N]> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    text.lines()
        .filter_map(|l| {
            let mut row = [0u32; N];
            let mut f = l.split('\t');
            for v in row.iter_mut() {
                *v = f.next()?.parse().ok()?;
            }
            Some(row)
        })
        .collect()
}

/// Loads the points-to workload's inputs into either program's relations.
macro_rules! load_pointsto {
    ($p:ident, $dir:expr) => {{
        let two = |n: &str| rows::<2>($dir, n).into_iter().map(|[a, b]| (a, b)).collect();
        let three = |n: &str| rows::<3>($dir, n).into_iter().map(|[a, b, c]| (a, b, c)).collect();
        let one = |n: &str| rows::<1>($dir, n).into_iter().map(|[a]| (a,)).collect();
        $p.address_of = two("address_of.tsv");
        $p.assign = two("assign.tsv");
        $p.load = two("load.tsv");
        $p.store = two("store.tsv");
        $p.call_site_in = two("call_site_in.tsv");
        $p.call_direct = two("call_direct.tsv");
        $p.call_indirect = two("call_indirect.tsv");
        $p.actual_arg = three("actual_arg.tsv");
        $p.formal_param = three("formal_param.tsv");
        $p.actual_return = two("actual_return.tsv");
        $p.formal_return = two("formal_return.tsv");
        $p.func_obj = two("func_obj.tsv");
        $p.entry = one("entry.tsv");
        $p.func = one("func.tsv");
    }};
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (workload, dir) = (args[1].as_str(), Path::new(&args[2]));
    let par = args.get(3).is_some_and(|a| a == "par");
    let count = match (workload, par) {
        ("tc", false) => { let mut p = Tc::default(); p.edge = pairs(dir, "edge.tsv"); p.run(); p.path.len() }
        ("tc", true) => { let mut p = TcPar::default(); p.edge = pairs(dir, "edge.tsv").into_iter().collect(); p.run(); p.path.len() }
        ("sg", false) => { let mut p = Sg::default(); p.parent = pairs(dir, "parent.tsv"); p.run(); p.sg.len() }
        ("sg", true) => { let mut p = SgPar::default(); p.parent = pairs(dir, "parent.tsv").into_iter().collect(); p.run(); p.sg.len() }
        ("andersen", false) => {
            let mut p = PointsTo::default();
            p.address_of = pairs(dir, "address_of.tsv");
            p.assign = pairs(dir, "assign.tsv");
            p.load = pairs(dir, "load.tsv");
            p.store = pairs(dir, "store.tsv");
            p.run();
            p.points_to.len()
        }
        ("andersen", true) => {
            let mut p = PointsToPar::default();
            p.address_of = pairs(dir, "address_of.tsv").into_iter().collect();
            p.assign = pairs(dir, "assign.tsv").into_iter().collect();
            p.load = pairs(dir, "load.tsv").into_iter().collect();
            p.store = pairs(dir, "store.tsv").into_iter().collect();
            p.run();
            p.points_to.len()
        }
        ("pointsto", false) => {
            let mut p = PointsToCalls::default();
            load_pointsto!(p, dir);
            p.run();
            p.points_to.len()
        }
        ("pointsto", true) => {
            let mut p = PointsToCallsPar::default();
            load_pointsto!(p, dir);
            p.run();
            p.points_to.len()
        }
        ("triangle", false) => { let mut p = Triangle::default(); p.edge = pairs(dir, "edge.tsv"); p.run(); p.tri.len() }
        ("triangle", true) => { let mut p = TrianglePar::default(); p.edge = pairs(dir, "edge.tsv").into_iter().collect(); p.run(); p.tri.len() }
        ("reach", false) => { let mut p = Reach::default(); p.edge = pairs(dir, "edge.tsv"); p.run(); p.reach.len() }
        ("reach", true) => { let mut p = ReachPar::default(); p.edge = pairs(dir, "edge.tsv").into_iter().collect(); p.run(); p.reach.len() }
        _ => panic!("unknown workload {workload}"),
    };
    println!("{count}");
}
