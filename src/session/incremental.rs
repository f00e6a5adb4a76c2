//! Incremental mode (`tl watch`, `prog.insert`/`remove`/`commit`): the program evaluated
//! once and kept up to date as facts of its input relations are inserted and removed, each
//! commit returning what changed.
//!
//! By default the standard engine keeps it ([`Maintained`]: continued semi-naive for
//! insertions, delete and re-derive for removals, other strata evaluated again only where
//! they read what changed). [`Session::run_incremental_on`] keeps it in a differential
//! dataflow instead, over several processes if asked. A commit whose facts use a value the
//! domains do not hold yet grows them in place where the kept values allow (`grow.rs`);
//! otherwise it binds the relation's new rows and evaluates again from scratch; its changes
//! are the same either way.

use super::overlay::Overlay;
use super::{cell, eval_options, rows_matching, Row, RunOptions, Session};
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{Cluster, Delta, Incremental, Maintained};
use crate::output;
use crate::semantics::{number_text, Checked, Kind, Output, TensorId};
use crate::tensor::{Storage, Tensor};
use std::collections::{BTreeMap, BTreeSet};

/// What a commit changed in one derived tensor, as rows like [`Session::rows`] gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct Changes {
    /// The tensor's name.
    pub name: String,
    /// Rows that hold now and did not before (an element with its new value).
    pub added: Vec<Row>,
    /// Rows that held before and do not now (an element with its old value).
    pub removed: Vec<Row>,
}

/// Which engine keeps the values up to date.
enum Keeper {
    /// The standard engine, in this process.
    Standard(Maintained),
    /// A differential dataflow on a cluster.
    Dataflow(Box<Incremental>, Cluster),
}

/// The incremental state a session keeps between commits.
pub(super) struct Live {
    keeper: Keeper,
    options: RunOptions,
}

/// Facts waiting for the next commit: relation, fields, +1 or −1.
pub(super) type Staged = Vec<(String, Vec<String>, isize)>;

impl Session {
    /// Runs the program on the standard engine and keeps it up to date for
    /// [`Session::insert`], [`Session::remove`] and [`Session::commit`]. Returns the query
    /// answers, as [`Session::run`] does (and writes the program's files).
    pub fn run_incremental(&mut self, options: &RunOptions) -> Result<Vec<String>, Diagnostics> {
        self.start_live(options, |checked, plan, o| {
            let (kept, values) = Maintained::start(checked, plan, o)?;
            let log = kept.log().to_vec();
            Ok((Keeper::Standard(kept), values, log))
        })
    }

    /// [`Session::run_incremental`] with a differential dataflow on `cluster` keeping the
    /// values, this session being process 0: it alone takes commits and gathers their
    /// changes, while every other process runs [`Session::serve_incremental`] on the same
    /// program and files.
    pub fn run_incremental_on(
        &mut self,
        options: &RunOptions,
        cluster: &Cluster,
    ) -> Result<Vec<String>, Diagnostics> {
        self.start_live(options, |checked, plan, o| {
            let inc = Incremental::start(checked, plan, o, cluster)?;
            let (values, log) = (inc.values().to_vec(), inc.log().to_vec());
            Ok((
                Keeper::Dataflow(Box::new(inc), cluster.clone()),
                values,
                log,
            ))
        })
    }

    /// Checks the program (with the facts of earlier commits), evaluates it with the keeper
    /// `start` makes, publishes the answers, and keeps the keeper for commits.
    fn start_live(
        &mut self,
        options: &RunOptions,
        start: impl FnOnce(
            &Checked,
            &crate::plan::Plan,
            &crate::eval::EvalOptions,
        )
            -> Result<(Keeper, Vec<Tensor>, Vec<crate::eval::Decision>), Diagnostics>,
    ) -> Result<Vec<String>, Diagnostics> {
        self.live = None;
        self.check_for(options)?;
        self.apply_overlay();
        let checked = self.checked.as_ref().ok_or_else(super::not_checked)?;
        let plan = self.plan.as_ref().ok_or_else(super::not_checked)?;
        let o = eval_options(options, &self.functions);
        let (keeper, values, log) =
            start(checked, plan, &o).map_err(|d| d.located(&self.file_name, &self.source))?;
        self.log = log;
        self.rounds = o.provenance.as_ref().map(|p| p.take());
        let lines = self.publish(values, options)?;
        self.live = Some(Live {
            keeper,
            options: options.clone(),
        });
        Ok(lines)
    }

    /// Takes part, as one of the other processes of `cluster`, in the incremental run that
    /// process 0 drives with [`Session::run_incremental_on`]: evaluates what comes before
    /// the dataflow, serves its share of the dataflow, and returns when process 0 ends the
    /// run (an error if process 0 is lost). Answers and files are process 0's. When a
    /// commit at process 0 needs a fresh evaluation, process 0 sends every commit's facts
    /// so far, and this process takes them and serves the new run.
    pub fn serve_incremental(
        &mut self,
        options: &RunOptions,
        cluster: &Cluster,
    ) -> Result<(), Diagnostics> {
        loop {
            self.check_for(options)?;
            self.apply_overlay();
            let checked = self.checked.as_ref().ok_or_else(super::not_checked)?;
            let plan = self.plan.as_ref().ok_or_else(super::not_checked)?;
            let o = eval_options(options, &self.functions);
            let again = Incremental::serve(checked, plan, &o, cluster)
                .map_err(|d| d.located(&self.file_name, &self.source))?;
            let Some(message) = again else {
                return Ok(());
            };
            self.overlay = Overlay::decode(&message).ok_or_else(|| {
                Diagnostic::global(
                    codes::COMMIT,
                    "process 0 sent facts this process cannot read: are both the same version of tl?",
                )
            })?;
            for (name, rows) in &self.overlay.tables() {
                self.bind_rows(name, rows);
            }
        }
    }

    /// Stages facts to insert into relation `name` at the next [`Session::commit`]: one row
    /// of fields per tuple, as a `.tsv` file would hold them.
    pub fn insert(&mut self, name: &str, rows: &[Vec<String>]) -> Result<(), Diagnostics> {
        self.stage(name, rows, 1)
    }

    /// Stages facts to remove from relation `name` at the next [`Session::commit`].
    pub fn remove(&mut self, name: &str, rows: &[Vec<String>]) -> Result<(), Diagnostics> {
        self.stage(name, rows, -1)
    }

    fn stage(&mut self, name: &str, rows: &[Vec<String>], sign: isize) -> Result<(), Diagnostics> {
        let checked = self.checked.as_ref().ok_or_else(super::not_checked)?;
        let t = checked
            .tensor_id(name)
            .ok_or_else(|| super::unknown(name))?;
        let info = &checked.tensors[t];
        let (rank, valued) = (info.shape.len(), info.kind != Kind::Bool);
        let mut errors = Vec::new();
        if valued && !info.sparse_values {
            errors.push(Diagnostic::global(
                codes::FILE_ROW,
                format!("`{name}` has a value at every position: only a relation's facts, or the elements of a tensor given element by element or by a file, can be inserted or removed"),
            ));
        }
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        // An element to insert is its positions and its value; one to remove, its
        // positions (a value after them is ignored, so a file's old row removes it).
        let fits = |n: usize| match (valued, sign > 0) {
            (false, _) => n == rank,
            (true, true) => n == rank + 1,
            (true, false) => n == rank || n == rank + 1,
        };
        for (i, r) in rows.iter().enumerate() {
            if !fits(r.len()) {
                let wanted = match valued {
                    true => format!("{rank} position{} and a value", plural(rank)),
                    false => format!("{rank} position{}", plural(rank)),
                };
                errors.push(Diagnostic::global(
                    codes::FILE_ROW,
                    format!(
                        "row {} for `{name}` has {} field{}; `{name}` has {wanted}",
                        i + 1,
                        r.len(),
                        plural(r.len()),
                    ),
                ));
            } else if valued && sign > 0 && number_text(&r[rank]).is_none() {
                errors.push(Diagnostic::global(
                    codes::FILE_ROW,
                    format!("row {} for `{name}`: `{}` is not a number", i + 1, r[rank]),
                ));
            }
        }
        if !errors.is_empty() {
            return Err(Diagnostics(errors));
        }
        for r in rows {
            let fields = match sign > 0 {
                true => r.clone(),
                false => r[..rank.min(r.len())].to_vec(),
            };
            self.staged.push((name.to_string(), fields, sign));
        }
        Ok(())
    }

    /// Applies the staged facts and returns the changes of every tensor the program derives
    /// (those that changed), in the order the program declares them.
    pub fn commit(&mut self) -> Result<Vec<Changes>, Diagnostics> {
        let staged = std::mem::take(&mut self.staged);
        if self.live.is_none() {
            return Err(Diagnostic::global(
                codes::QUERY,
                "start incremental mode (`run_incremental`) before committing",
            )
            .into());
        }
        self.grow_domains(&staged);
        self.no_ops = self.no_ops_of(&staged);
        let changes = self.positions(&staged);
        let before = self.overlay.clone();
        for (name, fields, sign) in &staged {
            let rank = self.checked.as_ref().and_then(|c| {
                let t = c.tensor_id(name)?;
                (c.tensors[t].kind != Kind::Bool).then_some(c.tensors[t].shape.len())
            });
            self.overlay.record(name, fields, *sign, rank);
        }
        match changes {
            Some(changes) => self.commit_round(&changes),
            None => self.commit_again(before),
        }
    }

    /// Whether the standard engine keeps the values, in this process.
    pub(super) fn kept_by_standard_engine(&self) -> bool {
        matches!(
            self.live.as_ref().map(|l| &l.keeper),
            Some(Keeper::Standard(_))
        )
    }

    /// The facts of the last commit that changed nothing: `+R(a, b)` for a relation's tuple
    /// inserted while it held, `-R(a, b)` for one removed while it did not (each judged
    /// after the commit's earlier facts). A commit's result reports what changed; this says
    /// what was asked for in vain, as `tl watch` notes.
    pub fn no_ops(&self) -> &[String] {
        &self.no_ops
    }

    fn no_ops_of(&self, staged: &Staged) -> Vec<String> {
        let (Some(checked), Some(values)) = (self.checked.as_ref(), self.values.as_ref()) else {
            return Vec::new();
        };
        let mut now: BTreeMap<(TensorId, Vec<u32>), bool> = BTreeMap::new();
        let mut out = Vec::new();
        for (name, fields, sign) in staged {
            let Some(t) = checked.tensor_id(name) else {
                continue;
            };
            if checked.tensors[t].kind != Kind::Bool {
                continue;
            }
            let pos: Option<Vec<u32>> = fields
                .iter()
                .enumerate()
                .map(|(ax, f)| position(checked, t, ax, f))
                .collect();
            let holds = match &pos {
                Some(pos) => *now
                    .entry((t, pos.clone()))
                    .or_insert_with(|| values[t].get_at(pos).is_some_and(|v| v != 0.0)),
                None => false,
            };
            if holds == (*sign > 0) {
                let mark = if *sign > 0 { '+' } else { '-' };
                out.push(format!("{mark}{name}({})", fields.join(", ")));
            }
            if let Some(pos) = pos {
                now.insert((t, pos), *sign > 0);
            }
        }
        out
    }

    /// Takes the facts commits removed out of the checked program's facts, and sets (or
    /// removes) the elements they changed: a bound row's value was added to the program's
    /// own (§7), where a commit replaces it.
    fn apply_overlay(&mut self) {
        let Some(checked) = self.checked.as_mut() else {
            return;
        };
        let positions = |checked: &crate::semantics::Checked, t: TensorId, f: &[String]| {
            f.iter()
                .enumerate()
                .map(|(ax, x)| position(checked, t, ax, x))
                .collect::<Option<Vec<u32>>>()
        };
        for (name, (_, removed)) in &self.overlay.relations {
            let Some(t) = checked.tensor_id(name) else {
                continue;
            };
            let rows: Vec<Vec<u32>> = removed
                .iter()
                .filter_map(|f| positions(checked, t, f))
                .collect();
            if let Some(Tensor {
                storage: Storage::Relation(r),
                ..
            }) = checked.data[t].as_mut()
            {
                for row in rows {
                    r.set(&row, false);
                }
            }
        }
        for (name, elements) in &self.overlay.elements {
            let Some(t) = checked.tensor_id(name) else {
                continue;
            };
            let elem = checked.tensors[t].elem;
            let changes: BTreeMap<Vec<u32>, Option<f64>> = elements
                .iter()
                .filter_map(|(f, v)| {
                    let value = match v {
                        Some(text) => Some(elem.round(number_text(text)?.parse().ok()?)),
                        None => None,
                    };
                    Some((positions(checked, t, f)?, value))
                })
                .collect();
            if let Some(Tensor {
                storage: Storage::Sparse(m),
                ..
            }) = checked.data[t].as_mut()
            {
                *m = m.changed(changes.iter().map(|(k, v)| (k.as_slice(), *v)));
            }
        }
    }

    /// The staged facts as positions, when every value is in its domain and every
    /// relation can change in a dataflow round.
    fn positions(&self, staged: &Staged) -> Option<Vec<(TensorId, Vec<u32>, isize)>> {
        let (checked, live) = (self.checked.as_ref()?, self.live.as_ref()?);
        staged
            .iter()
            .map(|(name, fields, sign)| {
                let t = checked.tensor_id(name)?;
                let updatable = match &live.keeper {
                    Keeper::Standard(m) => m.updatable(checked, t),
                    Keeper::Dataflow(inc, _) => inc.updatable(checked, t),
                };
                if !updatable {
                    return None;
                }
                let info = &checked.tensors[t];
                let rank = info.shape.len();
                let pos: Option<Vec<u32>> = fields[..rank.min(fields.len())]
                    .iter()
                    .enumerate()
                    .map(|(ax, f)| position(checked, t, ax, f))
                    .collect();
                let mut row = pos?;
                // An element to insert carries its value's words, as the dataflow's rows do.
                if let Some(text) = fields.get(rank) {
                    let v: f64 = number_text(text)?.parse().ok()?;
                    row.extend(Delta::words(info.elem.round(v)));
                }
                Some((t, row, *sign))
            })
            .collect()
    }

    /// Carries the commit's changes through the live run.
    fn commit_round(
        &mut self,
        changes: &[(TensorId, Vec<u32>, isize)],
    ) -> Result<Vec<Changes>, Diagnostics> {
        // Rounds of first derivation describe the evaluation, not what commits change.
        self.rounds = None;
        let (Some(checked), Some(plan), Some(live)) = (&self.checked, &self.plan, &mut self.live)
        else {
            return Err(super::not_checked().into());
        };
        let o = eval_options(&live.options, &self.functions);
        let (inc, _) = match &mut live.keeper {
            Keeper::Dataflow(inc, cluster) => (inc, cluster),
            Keeper::Standard(kept) => {
                let Some(values) = self.values.as_mut() else {
                    return Err(super::not_checked().into());
                };
                return match kept.update((checked, plan), &o, values, changes) {
                    Ok(deltas) => {
                        self.log = kept.log().to_vec();
                        Ok(deltas
                            .iter()
                            .map(|(&t, d)| changes_of(checked, t, d))
                            .collect())
                    }
                    // The commit's facts stay; what rules derive from the failed stratum
                    // on keeps its last values until a commit succeeds.
                    Err(d) => Err(d.located(&self.file_name, &self.source)),
                };
            }
        };
        let update = inc.update(checked, plan, &o, changes);
        let current = inc.values();
        let deltas = match update {
            Ok(deltas) => deltas,
            Err(d) => {
                // A failed commit's facts stay; what rules derive keeps its last values
                // until a commit succeeds.
                if let Some(values) = &mut self.values {
                    let facts: BTreeSet<TensorId> = changes.iter().map(|(t, _, _)| *t).collect();
                    for t in facts {
                        values[t] = current[t].clone();
                    }
                }
                return Err(d.located(&self.file_name, &self.source));
            }
        };
        if let Some(values) = &mut self.values {
            // Each tensor once, however many of its facts the commit changed.
            let touched: BTreeSet<TensorId> = deltas
                .keys()
                .copied()
                .chain(changes.iter().map(|(t, _, _)| *t))
                .collect();
            for t in touched {
                values[t] = current[t].clone();
            }
        }
        Ok(deltas
            .iter()
            .map(|(&t, d)| changes_of(checked, t, d))
            .collect())
    }

    /// Binds the facts every commit inserted and evaluates again from scratch (the facts
    /// commits removed, and the elements they set, are applied after the check). Over
    /// several processes, process 0 first sends the others those facts, and every process
    /// starts again. A commit whose facts do not check leaves the session as it was, its
    /// overlay `before` it.
    fn commit_again(&mut self, before: Overlay) -> Result<Vec<Changes>, Diagnostics> {
        let old_rows = self.derived_rows()?;
        let (options, cluster) = match &self.live {
            Some(Live {
                keeper: Keeper::Dataflow(_, cluster),
                options,
            }) => (options.clone(), Some(cluster.clone())),
            Some(l) => (l.options.clone(), None),
            None => (RunOptions::default(), None),
        };
        let tables = self.overlay.tables();
        let kept = Kept::take(self, &tables, before);
        for (name, rows) in &tables {
            self.bind_rows(name, rows);
        }
        if let Err(d) = self.check_for(&options) {
            kept.restore(self);
            return Err(d);
        }
        let mut kept = kept;
        if cluster.as_ref().is_some_and(|c| c.processes.is_some()) {
            // The others start again from what this run announces; this one's dataflow ends
            // when its live state is dropped, freeing the run's ports.
            if let (Some(live), Some(checked)) = (kept.live.as_mut(), kept.checked.as_ref()) {
                if let Keeper::Dataflow(inc, _) = &mut live.keeper {
                    let o = eval_options(&live.options, &self.functions);
                    inc.announce(checked, &o, self.overlay.encode())
                        .map_err(|d| d.located(&self.file_name, &self.source))?;
                }
            }
            kept.live = None;
        }
        let again = match &cluster {
            Some(cluster) => self.run_incremental_on(&options, cluster),
            None => self.run_incremental(&options),
        };
        if let Err(d) = again {
            kept.restore(self);
            return Err(d);
        }
        let new_rows = self.derived_rows()?;
        let mut out = Vec::new();
        for (name, new) in new_rows {
            let old = old_rows
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, r)| r.clone())
                .unwrap_or_default();
            let (added, removed) = difference(old, new);
            if !added.is_empty() || !removed.is_empty() {
                out.push(Changes {
                    name,
                    added,
                    removed,
                });
            }
        }
        Ok(out)
    }

    /// The files the program reads relations from: each relation's name and the file's
    /// path (what `tl watch` watches).
    pub fn input_files(&self) -> Vec<(String, std::path::PathBuf)> {
        use crate::syntax::ast::StmtKind;
        self.program
            .statements
            .iter()
            .filter_map(|st| match &st.kind {
                StmtKind::FileRead { name, path } => {
                    Some((name.text.clone(), self.base_dir.join(path)))
                }
                _ => None,
            })
            .collect()
    }

    /// The rows of fields of a delimited file, as the program would read it for relation
    /// `name` (to compare with what it held before).
    pub fn read_rows(
        &self,
        path: &std::path::Path,
        name: &str,
    ) -> Result<Vec<Vec<String>>, Diagnostics> {
        match crate::io::read_file(path, name) {
            Ok(crate::io::RawData::Table(t)) => Ok(t
                .rows()
                .map(|r| r.fields().map(str::to_string).collect())
                .collect()),
            Ok(_) => Err(Diagnostic::global(
                codes::FILE,
                format!("`{}` does not hold rows of fields", path.display()),
            )
            .into()),
            Err(e) => Err(Diagnostic::global(codes::FILE, e).into()),
        }
    }

    /// The answers to the program's queries with the current values, as [`Session::run`]
    /// prints them.
    pub fn answers(&self) -> Result<Vec<String>, Diagnostics> {
        let (checked, values) = self.ran()?;
        Ok(checked
            .outputs
            .iter()
            .filter_map(|out| match out {
                Output::Query(q) => Some(output::answer(checked, values, q)),
                Output::Write { .. } => None,
            })
            .flatten()
            .collect())
    }

    /// Every derived tensor's rows.
    fn derived_rows(&self) -> Result<Vec<(String, Vec<Row>)>, Diagnostics> {
        let (checked, values) = self.ran()?;
        Ok(checked
            .strata
            .iter()
            .filter(|s| !s.equations.is_empty())
            .flat_map(|s| s.tensors.iter())
            .map(|&t| {
                let rows = rows_matching(checked, &values[t], t, &[]);
                (checked.tensors[t].name.clone(), rows)
            })
            .collect())
    }
}

/// What a fresh evaluation replaces, kept to put back if the new facts do not check (or
/// the new run does not start): the session then goes on as before the commit.
struct Kept {
    live: Option<Live>,
    checked: Option<Checked>,
    plan: Option<crate::plan::Plan>,
    checked_with: Option<crate::semantics::Settings>,
    bindings: Vec<(String, Option<crate::io::RawData>)>,
    tensors: Vec<(String, Option<Tensor>)>,
    overlay: Overlay,
}

impl Kept {
    /// Takes the session's checked program and live run, and the data bound under the
    /// names of `tables`, which the fresh evaluation binds anew.
    fn take(s: &mut Session, tables: &[(String, Vec<Vec<String>>)], overlay: Overlay) -> Kept {
        Kept {
            live: s.live.take(),
            checked: s.checked.take(),
            plan: s.plan.take(),
            checked_with: s.checked_with.clone(),
            bindings: tables
                .iter()
                .map(|(n, _)| (n.clone(), s.bindings.get(n).cloned()))
                .collect(),
            tensors: tables
                .iter()
                .map(|(n, _)| (n.clone(), s.tensors.get(n).cloned()))
                .collect(),
            overlay,
        }
    }

    fn restore(self, s: &mut Session) {
        s.live = self.live;
        s.checked = self.checked;
        s.plan = self.plan;
        s.checked_with = self.checked_with;
        s.stale = false;
        for (name, raw) in self.bindings {
            match raw {
                Some(raw) => s.bindings.insert(name, raw),
                None => s.bindings.remove(&name),
            };
        }
        for (name, t) in self.tensors {
            if let Some(t) = t {
                s.tensors.insert(name, t);
            }
        }
        s.overlay = self.overlay;
    }
}

/// A row as a totally ordered key: positions renumber when a check adds symbols, so rows of
/// two checks are compared by their values.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Int(i64),
    Real(u64),
    Symbol(String),
}

fn key(row: &Row) -> (Vec<Key>, Option<u64>) {
    use super::Cell;
    let cells = row
        .0
        .iter()
        .map(|c| match c {
            Cell::Int(i) => Key::Int(*i),
            Cell::Real(r) => Key::Real(r.to_bits()),
            Cell::Symbol(s) => Key::Symbol(s.clone()),
        })
        .collect();
    (cells, row.1.map(f64::to_bits))
}

/// The rows of `new` not in `old`, and the reverse, by one sort of each.
fn difference(old: Vec<Row>, new: Vec<Row>) -> (Vec<Row>, Vec<Row>) {
    let keyed = |rows: Vec<Row>| -> BTreeMap<(Vec<Key>, Option<u64>), Row> {
        rows.into_iter().map(|r| (key(&r), r)).collect()
    };
    let (mut old, mut new) = (keyed(old), keyed(new));
    let common: Vec<_> = old
        .keys()
        .filter(|k| new.contains_key(*k))
        .cloned()
        .collect();
    for k in common {
        old.remove(&k);
        new.remove(&k);
    }
    (new.into_values().collect(), old.into_values().collect())
}

/// The position of value `text` on axis `ax` of tensor `t`, if its domain holds it.
fn position(p: &Checked, t: TensorId, ax: usize, text: &str) -> Option<u32> {
    let info = &p.tensors[t];
    let dom = &p.domains[*info.domains.get(ax)?];
    let pos = if let Some(table) = &dom.table {
        // An open column (§8): a value its table lacks makes the commit evaluate afresh,
        // with the value checked into the table.
        table.handle(text.trim().parse().ok()?)? as usize
    } else if dom.real {
        dom.position(&number_text(text)?)?
    } else if dom.symbolic {
        dom.position(text)?
    } else {
        let v: i64 = text.trim().parse().ok()?;
        let offset = info.offsets.get(ax).copied().unwrap_or(0);
        usize::try_from(v.checked_sub(offset)?).ok()?
    };
    (pos < *info.shape.get(ax)?)
        .then(|| u32::try_from(pos).ok())
        .flatten()
}

/// A delta in rows.
fn changes_of(p: &Checked, t: TensorId, d: &Delta) -> Changes {
    let valued = p.tensors[t].kind != Kind::Bool;
    let row = |r: &Vec<u32>| -> Row {
        let (idx, value) = match valued {
            true => {
                let (idx, v) = Delta::value(r);
                (idx, Some(v))
            }
            false => (r.as_slice(), None),
        };
        let cells = idx
            .iter()
            .enumerate()
            .map(|(ax, &pos)| cell(p, t, ax, pos as usize))
            .collect();
        (cells, value)
    };
    Changes {
        name: p.tensors[t].name.clone(),
        added: d.added.iter().map(row).collect(),
        removed: d.removed.iter().map(row).collect(),
    }
}
