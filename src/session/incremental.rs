//! Incremental mode (`tl watch`, `prog.insert`/`remove`/`commit`): the program evaluated
//! once with its Datalog strata in a dataflow that stays alive; inserting and removing
//! facts of its input relations, then committing, updates every derived tensor and returns
//! what changed.
//!
//! A commit whose facts use only values the domains already hold, on relations the
//! dataflow reads directly ([`Incremental::updatable`]), runs as one round of the
//! dataflow. Any other commit (a new symbol, a relation a dense stratum reads) binds the
//! relation's new rows and evaluates again from scratch; its changes are the same.

use super::{cell, eval_options, rows_matching, Row, RunOptions, Session};
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{Cluster, Delta, Incremental};
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

/// The incremental state a session keeps between commits.
pub(super) struct Live {
    inc: Incremental,
    options: RunOptions,
    cluster: Cluster,
}

/// Facts waiting for the next commit: relation, fields, +1 or −1.
pub(super) type Staged = Vec<(String, Vec<String>, isize)>;

/// Every commit's facts so far, per relation: those inserted (bound as rows, beside the
/// program's own facts) and those removed (taken out of the checked facts), so that a
/// check from scratch reproduces the state commits reached.
#[derive(Default)]
pub(super) struct Overlay {
    relations: BTreeMap<String, (Facts, Facts)>,
}

/// A relation's facts as rows of fields.
type Facts = BTreeSet<Vec<String>>;

impl Overlay {
    fn record(&mut self, name: &str, fields: &[String], sign: isize) {
        let (added, removed) = self.relations.entry(name.to_string()).or_default();
        if sign > 0 {
            removed.remove(fields);
            added.insert(fields.to_vec());
        } else {
            added.remove(fields);
            removed.insert(fields.to_vec());
        }
    }
}

impl Session {
    /// Runs the program with the differential engine on `workers` threads and keeps its
    /// dataflow alive for [`Session::insert`], [`Session::remove`] and [`Session::commit`].
    /// Returns the query answers, as [`Session::run`] does (and writes the program's files).
    pub fn run_incremental(
        &mut self,
        options: &RunOptions,
        workers: usize,
    ) -> Result<Vec<String>, Diagnostics> {
        let cluster = Cluster {
            workers,
            processes: None,
        };
        self.run_incremental_on(options, &cluster)
    }

    /// [`Session::run_incremental`] with the dataflow spread over the processes of
    /// `cluster`, this session being process 0: it alone takes commits and gathers their
    /// changes, while every other process runs [`Session::serve_incremental`] on the same
    /// program and files.
    pub fn run_incremental_on(
        &mut self,
        options: &RunOptions,
        cluster: &Cluster,
    ) -> Result<Vec<String>, Diagnostics> {
        self.live = None;
        self.check_for(options)?;
        self.remove_overlaid();
        let checked = self.checked.as_ref().ok_or_else(super::not_checked)?;
        let plan = self.plan.as_ref().ok_or_else(super::not_checked)?;
        let o = eval_options(options, &self.functions);
        let inc = Incremental::start(checked, plan, &o, cluster)
            .map_err(|d| d.located(&self.file_name, &self.source))?;
        self.log = inc.log().to_vec();
        let lines = self.publish(inc.values().to_vec(), options)?;
        self.live = Some(Live {
            inc,
            options: options.clone(),
            cluster: cluster.clone(),
        });
        Ok(lines)
    }

    /// Takes part, as one of the other processes of `cluster`, in the incremental run that
    /// process 0 drives with [`Session::run_incremental_on`]: evaluates what comes before
    /// the dataflow, serves its share of the dataflow, and returns when process 0 ends the
    /// run (an error if process 0 is lost). Answers and files are process 0's.
    pub fn serve_incremental(
        &mut self,
        options: &RunOptions,
        cluster: &Cluster,
    ) -> Result<(), Diagnostics> {
        self.check_for(options)?;
        let checked = self.checked.as_ref().ok_or_else(super::not_checked)?;
        let plan = self.plan.as_ref().ok_or_else(super::not_checked)?;
        let o = eval_options(options, &self.functions);
        Incremental::serve(checked, plan, &o, cluster)
            .map_err(|d| d.located(&self.file_name, &self.source))
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
        let changes = self.positions(&staged);
        if changes.is_none() {
            let names = staged.iter().map(|(n, _, _)| n);
            if let Some(name) = names
                .chain(self.overlay.relations.keys())
                .find(|n| self.has_values(n))
            {
                return Err(Diagnostic::global(
                    codes::COMMIT,
                    format!("this commit needs the program evaluated again from scratch (a value not in its domain yet, or a relation that a stratum before the dataflow or a value check reads), which incremental mode does not do once the elements of `{name}` change: declare the domains the facts use, or start again with the new facts"),
                )
                .into());
            }
        }
        for (name, fields, sign) in &staged {
            self.overlay.record(name, fields, *sign);
        }
        match changes {
            Some(changes) => self.commit_round(&changes),
            None => self.commit_again(),
        }
    }

    /// Whether `name` is a tensor with values (not a relation).
    fn has_values(&self, name: &str) -> bool {
        let Some(checked) = self.checked.as_ref() else {
            return false;
        };
        checked
            .tensor_id(name)
            .is_some_and(|t| checked.tensors[t].kind != Kind::Bool)
    }

    /// Takes the facts commits removed out of the checked program's facts.
    fn remove_overlaid(&mut self) {
        let Some(checked) = self.checked.as_mut() else {
            return;
        };
        for (name, (_, removed)) in &self.overlay.relations {
            let Some(t) = checked.tensor_id(name) else {
                continue;
            };
            let rows: Vec<Vec<u32>> = removed
                .iter()
                .filter_map(|f| {
                    f.iter()
                        .enumerate()
                        .map(|(ax, x)| position(checked, t, ax, x))
                        .collect()
                })
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
    }

    /// The staged facts as positions, when every value is in its domain and every
    /// relation can change in a dataflow round.
    fn positions(&self, staged: &Staged) -> Option<Vec<(TensorId, Vec<u32>, isize)>> {
        let (checked, live) = (self.checked.as_ref()?, self.live.as_ref()?);
        staged
            .iter()
            .map(|(name, fields, sign)| {
                let t = checked.tensor_id(name)?;
                if !live.inc.updatable(checked, t) {
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

    /// One round of the live dataflow.
    fn commit_round(
        &mut self,
        changes: &[(TensorId, Vec<u32>, isize)],
    ) -> Result<Vec<Changes>, Diagnostics> {
        let (Some(checked), Some(plan), Some(live)) = (&self.checked, &self.plan, &mut self.live)
        else {
            return Err(super::not_checked().into());
        };
        let o = eval_options(&live.options, &self.functions);
        let update = live.inc.update(checked, plan, &o, changes);
        let current = live.inc.values();
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

    /// Binds the facts every commit inserted and evaluates again from scratch (the facts commits removed are taken out after the check).
    fn commit_again(&mut self) -> Result<Vec<Changes>, Diagnostics> {
        let before = self.derived_rows()?;
        // Every commit's insertions so far, not only this one's: the check starts afresh.
        let tables: Vec<(String, Vec<Vec<String>>)> = self
            .overlay
            .relations
            .iter()
            .map(|(name, (added, _))| (name.clone(), added.iter().cloned().collect()))
            .collect();
        for (name, rows) in &tables {
            self.bind_rows(name, rows);
        }
        let (options, cluster) = match &self.live {
            Some(l) => (l.options.clone(), l.cluster.clone()),
            None => (RunOptions::default(), Cluster::default()),
        };
        if cluster.processes.is_some() {
            return Err(Diagnostic::global(
                codes::COMMIT,
                "this commit needs the program evaluated again from scratch (a value not in its domain yet, or a relation that a stratum before the dataflow or a value check reads), which a run over several processes cannot do: start the processes again with the new facts",
            )
            .into());
        }
        self.run_incremental_on(&options, &cluster)?;
        let after = self.derived_rows()?;
        let mut out = Vec::new();
        for (name, new) in after {
            let old = before
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
    let pos = if dom.real {
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
