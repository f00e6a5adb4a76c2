//! Planning: how each stratum will be evaluated, decided once per checked program and
//! stored as the [`Plan`] that evaluation executes and `tl explain` prints.
//!
//! The passes, in the order a stratum tries them:
//! - `datalog`: Datalog-shaped strata (run semi-naively by joins), counting strata and
//!   `min=`/`max=` path problems; `chains` finds the rules that are products of binary
//!   relations (which may run on bit matrices); `demand` rewrites rules for one bound
//!   query (magic sets);
//! - `einsum`: dense equations as contraction trees and fused elementwise passes, after
//!   `valid` (shifted reads over their valid intervals) and `constants` (folding), their
//!   elementwise expressions compiled by `rows` into row programs;
//! - `steps`: recursion along an index (`X[i, t + 1] = … X[j, t]`), one step at a time,
//!   its `max=`/`min=` products as `extreme` plans (strided loops over dense panels);
//! - `nest`: loop nests for every other equation, driven by the tuples of the sparse
//!   tensors they multiply; they are also what runs when a kernel above declines at run
//!   time (its inputs are not as planned).
//!
//! Every equation has a loop nest, so no stratum is left to the reference evaluator's
//! loops: they are the oracle (`--engine reference`, `--verify`, tests), not a fallback.

pub(crate) mod backward;
pub(crate) mod chains;
pub(crate) mod constants;
mod contraction_path;
pub(crate) mod dataflow;
pub(crate) mod datalog;
pub(crate) mod demand;
pub(crate) mod einsum;
pub(crate) mod extreme;
pub(crate) mod maintenance;
pub(crate) mod nest;
mod opt_einsum_greedy;
pub(crate) mod rows;
pub(crate) mod schedule;
pub(crate) mod steps;
pub(crate) mod valid;

use crate::semantics::{Checked, Stratum};

/// The kernel a stratum runs on.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// No equations: the stratum is its data.
    Data,
    /// Semi-naive joins over these rules; bit-matrix rows may take over a recursive stratum
    /// whose rules are all chains of binary relations (`chains::chains`).
    Datalog(Vec<datalog::Rule>, Option<Vec<chains::Chain>>),
    /// Counts over relations, by enumerating these joins, or as sparse matrix products where
    /// a rule is one ([`datalog::product`]).
    Counts(Vec<(datalog::Rule, Option<datalog::Product>)>),
    /// Semi-naive `min=`/`max=` over improved elements (declines for the cases whose outcome
    /// the reference defines).
    Extremum(Vec<datalog::ValuedRule>),
    /// Contraction trees and fused expressions (declines if inputs differ from the plan).
    Dense(Vec<einsum::DenseEquation>),
    /// Recursion along an index, one step at a time in index order.
    Steps(steps::Steps),
    /// A virtual index on the dense path, one step at a time.
    Virtual(Box<steps::Virtual>),
    /// Loop nests ([`StratumPlan::nests`]).
    Nest,
    /// The reference evaluator's loops: only in [`Plan::reference`], the oracle's plan.
    Reference,
}

/// How one stratum is evaluated.
#[derive(Clone, Debug)]
pub struct StratumPlan {
    /// The kernel chosen.
    pub kernel: Kernel,
    /// A relation the program's rules read only at constants, evaluated by the magic-sets
    /// rewrite of that demand (§9) instead of whole (the kernel runs if it declines): the
    /// queries its readers ask, and the rewrite.
    pub demand: Option<(Vec<crate::semantics::Query>, Box<demand::DemandPlan>)>,
    /// Loop nests of every equation: the kernel when it is [`Kernel::Nest`], otherwise what
    /// runs if the kernel declines at run time.
    pub nests: Vec<nest::NestEquation>,
    /// How incremental mode keeps it up to date after a commit.
    pub maintenance: maintenance::Maintenance,
}

/// The plan of every stratum, in `Checked::strata` order: built once, evaluated any number of
/// times (`tl bench`, training steps).
#[derive(Clone, Debug)]
pub struct Plan {
    /// One entry per stratum.
    pub strata: Vec<StratumPlan>,
    /// Per tensor: stored as its non-zero elements (every other element 0) rather than as a
    /// dense array. Chosen for a large sum computed from sparse products (a count over
    /// relations, a loop nest whose outer loop scans tuples), whose non-zeros are bounded by
    /// the tuples joined: memory then follows the non-zeros.
    pub sparse: Vec<bool>,
    /// The registered functions (§16) the program calls, each with an equation that calls
    /// it: what an evaluation checks its options for, without walking every equation.
    pub user_functions: Vec<(String, crate::diagnostics::Span)>,
    /// Relations narrowed to what their readers keep (§9, [`demand::narrow_by_readers`]):
    /// nothing prints or writes them, so they hold fewer tuples than the reference's.
    pub narrowed: Vec<crate::semantics::TensorId>,
}

/// A sum of sparse products with at least this many elements as a dense array (128 MiB of
/// f64) is stored as its non-zero elements.
pub(crate) const SPARSE_RESULT_ELEMENTS: u128 = 1 << 24;

impl Plan {
    /// The plan of a checked program: what the standard engine and the learning
    /// code evaluate.
    pub fn new(p: &Checked) -> Plan {
        plan(p)
    }

    /// A plan that evaluates every stratum with the reference loops (for the learning code's
    /// reference gradients).
    pub fn reference(p: &Checked) -> Plan {
        let strata = p
            .strata
            .iter()
            .map(|_| StratumPlan {
                kernel: Kernel::Reference,
                demand: None,
                nests: Vec::new(),
                maintenance: maintenance::Maintenance::Again("the reference plan"),
            })
            .collect();
        Plan {
            narrowed: Vec::new(),
            strata,
            sparse: vec![false; p.tensors.len()],
            user_functions: p.user_functions(),
        }
    }
}

/// Plans every stratum of a checked program.
pub(crate) fn plan(p: &Checked) -> Plan {
    let mut sparse: Vec<bool> = (0..p.tensors.len())
        .map(|t| data_stored_sparse(p, t))
        .collect();
    let mut strata = Vec::with_capacity(p.strata.len());
    let mut defined_only = vec![false; p.tensors.len()];
    for st in &p.strata {
        let mut sp = plan_stratum(p, st, &sparse);
        if reads_defined_only(&sp.kernel, &defined_only) || !shaped_as_read(p, &sp.kernel) {
            sp.kernel = Kernel::Nest;
        }
        if computes_in_floats(&sp.kernel) && integer_values(p, st) {
            // Index order stays: step by step, in i64.
            sp.kernel = match std::mem::replace(&mut sp.kernel, Kernel::Nest) {
                Kernel::Steps(s) => s.exact().map_or(Kernel::Nest, Kernel::Steps),
                _ => Kernel::Nest,
            };
        }
        for &t in &st.tensors {
            sparse[t] |= stored_sparse(p, st, &sp, t);
            defined_only[t] = defined_only_storage(p, &sp.kernel, t);
        }
        strata.push(sp);
    }
    let narrowed = demand::narrow_by_readers(p, &mut strata);
    Plan {
        narrowed,
        strata,
        sparse,
        user_functions: p.user_functions(),
    }
}

/// Whether a kernel computes its elements in floating point, exact for integers only below
/// 2⁵³. Semi-naive `min=`/`max=` is not one: it adds integers in f64 only while every
/// operand and partial sum is below 2⁵³, and declines to the nests otherwise.
fn computes_in_floats(kernel: &Kernel) -> bool {
    matches!(
        kernel,
        Kernel::Dense(_) | Kernel::Steps(_) | Kernel::Virtual(_)
    )
}

/// Whether an equation of the stratum computes an `int` tensor from integer values (an
/// integer tensor's elements, a variable's value, a constant beyond ±1) rather than by
/// counting Boolean reads: its elements may pass 2⁵³, so the loop nests compute it in exact
/// i64 (§8). A count stays below 2⁵³ wherever the points it counts can be visited.
fn integer_values(p: &Checked, st: &Stratum) -> bool {
    p.equations.iter().any(|eq| {
        st.tensors.contains(&eq.target)
            && p.tensors[eq.target].elem == crate::tensor::ElemType::Int
            && integer_values_in(&eq.rhs, p)
    })
}

/// [`integer_values`] of one expression.
fn integer_values_in(n: &crate::semantics::Node, p: &Checked) -> bool {
    use crate::semantics::Node;
    let values = |n: &Node| integer_values_in(n, p);
    match n {
        Node::Const(c) => c.value().abs() > 1.0,
        Node::Var(_) => true,
        Node::Read { tensor, .. } => p.tensors[*tensor].elem == crate::tensor::ElemType::Int,
        Node::Compare(..) => false,
        Node::Sum { body, .. } | Node::Neg(body) | Node::Not(body) => values(body),
        Node::Normalize(_, _, body) | Node::Concat { arg: body, .. } => values(body),
        Node::Product(fs) => fs.iter().any(|(_, f)| values(f)),
        Node::Binary(_, a, b) => values(a) || values(b),
        Node::Call(_, args) => args.iter().any(values),
    }
}

/// What visiting one point of a loop nest costs, in the dense path's FLOPs: a point reads
/// and combines its values through an interpreted expression.
const NEST_POINT_FLOPS: f64 = 32.0;

/// Whether the loop nests of a stratum that is not recursive are expected to cost less than
/// its dense plan: the dense path evaluates every element of its grids, a nest only the
/// points its scans reach (a held triple times every entity, not every triple).
fn nests_cheaper(
    p: &Checked,
    st: &Stratum,
    dense: &[einsum::DenseEquation],
    nests: &[nest::NestEquation],
) -> bool {
    let dense_flops: f64 = dense.iter().map(|d| d.flops).sum();
    let nest_flops: f64 = nests.iter().map(|n| n.points(p)).sum::<f64>() * NEST_POINT_FLOPS;
    !st.recursive && nests.iter().any(|n| n.driven()) && 4.0 * nest_flops < dense_flops
}

/// Whether tensor `t` of a planned stratum is best stored as its non-zeros: a large sum
/// without data, not recursive, every equation of it a count over relations or a loop nest
/// driven by tuples.
fn stored_sparse(p: &Checked, st: &Stratum, sp: &StratumPlan, t: usize) -> bool {
    use crate::semantics::{Family, Kind};
    let info = &p.tensors[t];
    let elements = info.elements();
    let candidate = info.kind != Kind::Bool
        && info.family == Family::Sum
        && !info.sparse_values
        && p.data[t].is_none()
        && !st.recursive
        && elements >= SPARSE_RESULT_ELEMENTS;
    let driven = match &sp.kernel {
        Kernel::Counts(_) => true,
        Kernel::Nest => sp
            .nests
            .iter()
            .filter(|n| n.target == t)
            .all(|n| n.driven()),
        _ => false,
    };
    candidate && driven
}

/// Whether a `max=`/`min=` tensor is stored as its defined elements: unless the dense
/// kernel computes it (which stores it dense when every element is written), whoever
/// computes it keeps only the elements written.
fn defined_only_storage(p: &Checked, kernel: &Kernel, t: usize) -> bool {
    use crate::semantics::{Family, Kind};
    let info = &p.tensors[t];
    let extreme = matches!(info.family, Family::Max | Family::Min) && info.kind != Kind::Bool;
    extreme && (!matches!(kernel, Kernel::Dense(_)) || p.data[t].is_some())
}

/// Whether a dense plan multiplies a tensor stored as its defined elements: it would
/// decline at run time every time, so the stratum is planned on its loop nests instead.
fn reads_defined_only(kernel: &Kernel, defined_only: &[bool]) -> bool {
    let Kernel::Dense(plans) = kernel else {
        return false;
    };
    let mut factors = plans
        .iter()
        .flat_map(|d| d.terms.iter().flat_map(|c| &c.factors));
    factors.any(|f| defined_only[f.tensor])
}

/// Whether every tensor a dense plan multiplies has the extents its variables range over
/// (a window its window's shape; a relation read at a shift, any): the kernel checks this
/// again at run time and declines where it does not hold, which shapes fixed by checking
/// decide before anything runs. A tensor of element facts `W[1, 0] = 0` read as
/// `W[x, y]` with `x` and `y` over 8 nodes is read through the loop nests.
fn shaped_as_read(p: &Checked, kernel: &Kernel) -> bool {
    let Kernel::Dense(plans) = kernel else {
        return true;
    };
    plans.iter().all(|d| {
        let reads = |f: &einsum::Factor, as_relation| {
            f.reads_shape(&p.tensors[f.tensor].shape, &d.extents, as_relation)
        };
        d.terms.iter().all(|c| {
            c.factors.iter().all(|f| reads(f, false)) && c.sparse.iter().all(|f| reads(f, true))
        })
    })
}

/// Whether tensor `t` is data whose elements are all defined and that the checker stored
/// as its non-zeros, as its data decided (a declared matrix read from a file of few
/// weighted rows): its readers scatter its elements rather than read a dense array.
fn data_stored_sparse(p: &Checked, t: usize) -> bool {
    let stored = matches!(&p.data[t], Some(d) if matches!(&d.storage, crate::tensor::Storage::Sparse(s) if s.zeros()));
    stored && crate::semantics::budget::is_dense(&p.tensors[t])
}

/// Whether a stratum's equations have a variable of an open domain (§8) or read or write
/// an open axis.
fn meets_open_columns(p: &Checked, st: &Stratum) -> bool {
    let open_axis = |t: usize| p.tensors[t].domains.iter().any(|&d| p.domains[d].is_open());
    st.equations.iter().any(|&e| {
        let eq = &p.equations[e];
        let mut reads = open_axis(eq.target);
        eq.rhs.reads(&mut |t, _| reads |= open_axis(t));
        reads || eq.vars.iter().any(|v| v.open.is_some())
    })
}

fn plan_stratum(p: &Checked, st: &Stratum, sparse: &[bool]) -> StratumPlan {
    let nests: Vec<nest::NestEquation> = st
        .equations
        .iter()
        .map(|&e| nest::plan_nest(p, e, sparse))
        .collect();
    let kernel = if st.equations.is_empty() {
        Kernel::Data
    } else if let Some(r) = datalog::plan_stratum(p, st).filter(|r| !r.is_empty()) {
        let chained = chains::chains(&r).filter(|_| st.recursive);
        Kernel::Datalog(r, chained)
    } else if let Some(r) = datalog::plan_counts(p, st).filter(|r| !r.is_empty()) {
        // With data of its own, the count adds to it element by element.
        let products = p.data[st.tensors[0]].is_none();
        let r = r
            .into_iter()
            .map(|r| {
                let product = datalog::product(&r).filter(|_| products);
                (r, product)
            })
            .collect();
        Kernel::Counts(r)
    } else if let Some(r) = datalog::plan_extremum(p, st).filter(|r| !r.is_empty()) {
        Kernel::Extremum(r)
    } else if meets_open_columns(p, st) {
        // Open columns have no extent to lay a step axis, a window or a grid along.
        Kernel::Nest
    } else if let Some(s) = steps::plan_steps(p, st, sparse) {
        Kernel::Steps(s)
    } else if let Some(v) = steps::plan_virtual(p, st, sparse) {
        Kernel::Virtual(Box::new(v))
    } else if let Some(d) = einsum::plan_dense(p, st, sparse)
        .filter(|d| !d.is_empty() && !nests_cheaper(p, st, d, &nests))
    {
        Kernel::Dense(d)
    } else {
        Kernel::Nest
    };
    let demand = match &kernel {
        Kernel::Datalog(..) => demand::asked_by_program(p, st)
            .and_then(|q| Some((q.clone(), Box::new(demand::plan_program_demand(p, &q)?))))
            .filter(|(_, d)| !st.tensors.iter().any(|t| d.full.contains(t))),
        _ => None,
    };
    let mut sp = StratumPlan {
        kernel,
        demand,
        nests,
        maintenance: maintenance::Maintenance::Data,
    };
    sp.maintenance = maintenance::plan_maintenance(p, st, &sp);
    sp
}
