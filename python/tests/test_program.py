"""The Python API end to end: programs from text and files, bindings in every accepted
form, runs, results as arrays and rows, queries, explain, and errors."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tensorlogic as tl

FAMILY = """
Ancestor(x, y) :- Parent(x, y).
Ancestor(x, z) :- Ancestor(x, y), Parent(y, z).
"""


def test_relations_in_as_tuples_and_out_as_rows():
    prog = tl.Program(FAMILY)
    prog.bind("Parent", [("Alice", "Bob"), ("Bob", "Carol")])
    prog.run()
    assert prog.query("Ancestor(Alice, x)") == [("Alice", "Bob"), ("Alice", "Carol")]
    assert sorted(prog.rows("Ancestor")) == [
        ("Alice", "Bob"), ("Alice", "Carol"), ("Bob", "Carol")]
    assert prog.answers("Ancestor(Bob, x)") == ["Ancestor(Bob, Carol)"]


def test_integer_rows_from_numpy_and_values_as_python_numbers():
    prog = tl.Program("Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n"
                      "Price(A, 1.25).\nPrice(B, -3).\n")
    prog.bind("Edge", np.array([[0, 1], [1, 2], [2, 3]], dtype=np.int64))
    prog.run()
    rows = prog.query("Path(0, x)")
    assert rows == [(0, 1), (0, 2), (0, 3)]
    assert all(isinstance(v, int) for r in rows for v in r)
    assert prog.rows("Price") == [("A", 1.25), ("B", -3)]


def test_dense_tensors_in_and_out_keep_their_type():
    prog = tl.Program("H[b, h] = relu(W[h, i] X[b, i] + B[h])\n")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    prog.bind("X", x).bind("W", w).bind("B", b)
    prog.run(threads=2)
    h = prog["H"]
    assert h.dtype == np.float32 and h.shape == (4, 5)
    np.testing.assert_allclose(h, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-6)


def test_a_declared_real_tensor_takes_integer_arrays_and_nested_lists_as_values():
    src = "X : real[2, 3]\nS[b] = X[b, i]\n"
    prog = tl.Program(src).bind("X", np.ones((2, 3), np.int64))
    prog.run()
    np.testing.assert_allclose(prog["S"], [3, 3])
    prog = tl.Program(src).bind("X", [[1.5, 2.0, 0.5], [1.0, 1.0, 1.0]])
    prog.run()
    np.testing.assert_allclose(prog["S"], [4, 3])


def test_threads_default_to_every_core_and_zero_is_an_error():
    prog = tl.Program("A = [1, 2]\nS = A[i]\nS?\n")
    assert prog.run() == ["S = 3"]
    with pytest.raises(ValueError, match="threads must be 1 or more"):
        prog.run(threads=0)


def test_float64_arrays_stay_float64():
    prog = tl.Program("X : f64[3]\nY : f64[3]\nY[i] = X[i] * 2\n")
    prog.bind("X", np.array([1.0, 2.5, -1.0]))
    prog.run()
    y = prog["Y"]
    assert y.dtype == np.float64
    assert y.tolist() == [2.0, 5.0, -2.0]


def test_valued_rows_bind_a_valued_tensor():
    prog = tl.Program("Total = Score[x]\n")
    prog.bind("Score", [("Ann", 1.5), ("Ben", 2.0)])
    prog.run()
    assert float(prog["Total"]) == pytest.approx(3.5)


def test_pandas_frames_bind_relations():
    pd = pytest.importorskip("pandas")
    prog = tl.Program(FAMILY)
    prog.bind("Parent", pd.DataFrame({"p": ["Ann", "Ben"], "c": ["Ben", "Cid"]}))
    prog.run()
    assert prog.query("Ancestor(Ann, x)") == [("Ann", "Ben"), ("Ann", "Cid")]


class Exported:
    """An array from another library that NumPy knows only through DLPack."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_arrays_are_read_in_place():
    prog = tl.Program("Y[i] = X[i] + 1\n")
    x = np.arange(3, dtype=np.float32)
    prog.bind("X", Exported(x))
    prog.run()
    assert prog["Y"].tolist() == [1.0, 2.0, 3.0]
    assert np.shares_memory(prog._native.array("X"), x)
    wide = tl.Program("X : f64[3]\nY[i] = X[i] + 1\n")
    x = np.arange(3, dtype=np.float64)
    wide.bind("X", Exported(x)).run()
    assert np.shares_memory(wide._native.array("X"), x)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_torch_tensors_in_and_out_through_dlpack():
    torch = pytest.importorskip("torch")
    prog = tl.Program("Y[i] = X[i] + 1\n")
    x = torch.arange(3, dtype=torch.float32, requires_grad=True)
    prog.bind("X", x)
    prog.run()
    # A CPU tensor's storage is read in place: the engine's X is the tensor's memory.
    assert prog._native.array("X").ctypes.data == x.data_ptr()
    # A result goes to torch without a copy (read-only, as every result view is).
    for y in (torch.from_dlpack(prog["Y"]), torch.from_numpy(prog["Y"])):
        assert y.tolist() == [1.0, 2.0, 3.0]
        assert y.data_ptr() == prog["Y"].__array_interface__["data"][0]
    # float64 keeps its type.
    prog.bind("X", torch.zeros(3, dtype=torch.float64))
    prog.run()
    assert prog["Y"].dtype == np.float32 and prog["Y"].tolist() == [1.0, 1.0, 1.0]


def test_programs_from_files_read_their_data_beside_them(tmp_path):
    (tmp_path / "parent.tsv").write_text("Alice\tBob\nBob\tCarol\n")
    (tmp_path / "family.tl").write_text('Parent = "parent.tsv"\n' + FAMILY + "Ancestor(Alice, x)?\n")
    prog = tl.Program.from_file(tmp_path / "family.tl")
    assert prog.run() == ["Ancestor(Alice, Bob)", "Ancestor(Alice, Carol)"]
    base = tl.Program('Parent = "parent.tsv"\n' + FAMILY, base_dir=tmp_path)
    base.run()
    assert len(base.rows("Ancestor")) == 3


def test_explain_prints_the_plan_and_renders_in_notebooks():
    prog = tl.Program(FAMILY + 'Parent(A, B).\n')
    text = prog.explain()
    assert "Ancestor" in text and "stratum" in text
    assert prog._repr_html_().startswith("<pre>")
    assert "Ancestor" in prog.names()


def test_every_error_is_reported_with_its_place():
    with pytest.raises(tl.TensorLogicError) as e:
        tl.Program("A(x) :- B(x).\nC[i] = Nope[i]\n", name="bad.tl").run()
    err = e.value
    codes = [d["code"] for d in err.diagnostics]
    assert "E0101" in codes and len(codes) >= 2
    assert err.code == codes[0]
    assert err.file == "bad.tl" and err.line == 1 and err.column >= 1
    assert "bad.tl:1" in str(err)


def test_query_errors_point_into_the_query():
    prog = tl.Program("A = [1, 2]\nB = [3]\n", name="p.tl")
    prog.run()
    with pytest.raises(tl.TensorLogicError) as e:
        prog.query("A[i, j]")
    err = e.value
    assert err.file == "<query>" and err.line == 1, str(err)
    assert "A[i, j]" in str(err) and "A = [1, 2]" not in str(err)


def test_syntax_errors_raise_at_load():
    with pytest.raises(tl.TensorLogicError) as e:
        tl.Program("A(x :- B(x).\n")
    assert e.value.code == "E0001"


def test_reading_before_running_is_an_error():
    prog = tl.Program(FAMILY + "Parent(A, B).\n")
    with pytest.raises(tl.TensorLogicError):
        prog.rows("Ancestor")
    with pytest.raises(KeyError):
        prog["Ancestor"]


def test_run_releases_the_gil():
    # A chain long enough to take a while: another Python thread must keep counting.
    prog = tl.Program("Nat(0).\nNat(x + 1) :- Nat(x), x < 3000000.\nN = Nat(x)\n")
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    start = time.time()
    prog.run()
    elapsed = time.time() - start
    stop.set()
    t.join()
    assert float(prog["N"]) == 3000001
    # Had the run held the GIL, the counter would have stalled for all of it.
    assert len(ticks) > 0.25 * elapsed / 0.001 * 0.1


def _press_ctrl_c_until(done):
    """Sends SIGINT to this process, as a terminal's Ctrl-C does, every half second until
    `done` is set (an impatient user)."""
    while not done.wait(0.5):
        os.kill(os.getpid(), signal.SIGINT)


def _long_run_stops_on_ctrl_c(prog):
    done = threading.Event()
    presser = threading.Thread(target=_press_ctrl_c_until, args=(done,))
    presser.start()
    start = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            prog.run()
    finally:
        done.set()
        presser.join()
    return time.time() - start


LONG = "Nat(0).\nNat(x + 1) :- Nat(x), x < 200000000.\nN = Nat(x)\n"


def test_ctrl_c_stops_a_long_run():
    assert _long_run_stops_on_ctrl_c(tl.Program(LONG)) < 5


def test_ctrl_c_stops_a_long_run_that_follows_quick_ones():
    prog = tl.Program("Nat(0).\nNat(x + 1) :- Nat(x), Go(1), x < 200000000.\nN = Nat(x)\n")
    for _ in range(3):
        prog.bind("Go", [(0,)]).run()
        assert float(prog["N"]) == 1
    prog.bind("Go", [(1,)])
    assert _long_run_stops_on_ctrl_c(prog) < 5
    # Python's handler is back: a later Ctrl-C outside a run raises as usual.
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


def test_ctrl_c_handlers_of_the_user_are_called():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *_: seen.append(1))
    try:
        done = threading.Event()
        presser = threading.Thread(target=_press_ctrl_c_until, args=(done,))
        presser.start()
        try:
            with pytest.raises(tl.EvaluationError) as e:
                tl.Program(LONG).run()
        finally:
            done.set()
            presser.join()
        assert e.value.code == "E0403" and seen
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_timeout_ends_the_run_with_an_error():
    prog = tl.Program("Nat(0).\nNat(x + 1) :- Nat(x), x < 200000000.\nN = Nat(x)\n")
    with pytest.raises(tl.TensorLogicError) as e:
        prog.run(timeout=0.3)
    assert e.value.code == "E0403"


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"
TL = EXAMPLES.parent / "target" / "release" / "tl"


def test_errors_raise_the_class_of_their_family():
    with pytest.raises(tl.ParseError):
        tl.Program("A(x :- B(x).\n")
    with pytest.raises(tl.NameError):
        tl.Program("A(x) :- B(x).\n").run()
    with pytest.raises(tl.StratificationError):
        tl.Program("B(1).\nP(x) :- B(x), not Q(x).\nQ(x) :- B(x), not P(x).\n").run()
    with pytest.raises(tl.DataError):
        tl.Program('A = "missing.tsv"\nB(x) :- A(x).\n').run()
    assert issubclass(tl.QueryError, tl.TensorLogicError)


def test_training_reports_each_step_and_stops_when_asked():
    prog = tl.Program.from_file(EXAMPLES / "digits_logreg.tl")
    seen = []

    def callback(event):
        seen.append(event)
        return not (event["kind"] == "step" and event["step"] == 3)

    out = prog.train(lr=0.05, epochs=5, batch={"Example": 128}, eval=["Accuracy"],
                     callback=callback)
    steps = [e for e in seen if e["kind"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3] and out["step"] == 3
    assert len(out["losses"]) == 3 and steps[0]["loss"] == out["losses"][0]
    routes = [e for e in seen if e["kind"] == "routes"]
    assert len(routes) == 1 and routes[0]["step"] == 1 and not routes[0]["declined"]
    assert "dense gradient contractions, as planned" in routes[0]["log"]
    prog.run()
    assert 0.5 < float(prog["Accuracy"]) <= 1.0


def test_training_matches_tl_train_bit_for_bit(tmp_path):
    if not TL.exists():
        pytest.skip("target/release/tl is not built")
    import subprocess
    cli = tmp_path / "cli.safetensors"
    subprocess.run([str(TL), "train", str(EXAMPLES / "digits_logreg.tl"), "--batch", "Example:128",
                    "--epochs", "2", "--lr", "0.05", "--seed", "7", "--save", str(cli), "--quiet"],
                   check=True, capture_output=True)
    prog = tl.Program.from_file(EXAMPLES / "digits_logreg.tl")
    prog.train(lr=0.05, epochs=2, batch={"Example": 128}, seed=7)
    ours = tmp_path / "py.safetensors"
    prog.save(ours)
    again = tl.Program.from_file(EXAMPLES / "digits_logreg.tl")
    again.load(cli)
    again.run()
    prog.run()
    assert np.array_equal(prog["W"], again["W"]) and np.array_equal(prog["B"], again["B"])


def test_saved_parameters_load_into_a_new_program(tmp_path):
    prog = tl.Program.from_file(EXAMPLES / "digits_logreg.tl")
    prog.train(lr=0.05, steps=2, batch={"Example": 128})
    prog.save(tmp_path / "w.safetensors")
    prog.run()
    other = tl.Program.from_file(EXAMPLES / "digits_logreg.tl")
    other.load(tmp_path / "w.safetensors")
    other.run()
    assert np.array_equal(prog["W"], other["W"])


def test_gradients_agree_with_finite_differences():
    prog = tl.Program("X = [[1.0, 2.0], [0.5, -1.0]]\nY = [1.0, 0.0]\nW ~ normal(0, 0.1)\n"
                      "W : real[2]\nP[e] = sig(W[i] X[e, i])\nLoss = (P[e] - Y[e]) ^ 2\n")
    checks = prog.check_gradients()
    assert checks and all(c["worst"] < 1e-4 for c in checks)


def test_python_functions_are_called_by_name():
    tl.function("twice", lambda x: 2 * x, lambda x: 2.0)
    prog = tl.Program("X = [1.0, -2.0]\nY[i] = twice(X[i]) + 1\n")
    prog.run()
    assert prog["Y"].tolist() == [3.0, -3.0]


def test_dense_results_are_shared_not_copied():
    prog = tl.Program("X : real[2, 3]\nY[i, j] = X[i, j] * 2\nS : f64[2]\nS[i] = X[i, j]\n")
    prog.bind("X", np.arange(6, dtype=np.float32).reshape(2, 3))
    prog.run()
    a, b = prog["Y"], prog["Y"]
    assert np.shares_memory(a, b), "both view the engine's buffer"
    assert a.ctypes.data == b.ctypes.data and not a.flags.writeable
    s = prog["S"]
    assert s.dtype == np.float64 and np.shares_memory(s, prog["S"])
    prog.run()
    assert a.tolist() == [[0, 2, 4], [6, 8, 10]], "an array outlives the run it came from"
    assert not np.shares_memory(a, prog["Y"]), "a new run has new buffers"
    copy = np.array(prog["Y"])
    copy[0, 0] = 7
    assert prog["Y"][0, 0] == 0


def test_relations_out_as_frames_and_integer_arrays():
    prog = tl.Program("Edge(1, 2). Edge(2, 3).\nPath(x, y) :- Edge(x, y).\n"
                      "Path(x, z) :- Path(x, y), Edge(y, z).\nDeg[x] = Edge(x, y)\nName(1, Ann).\n")
    prog.run()
    t = prog.tuples("Path")
    assert t.dtype == np.int64 and t.tolist() == [[1, 2], [1, 3], [2, 3]]
    again = tl.Program("R(x, y) :- P(x, y).\n").bind("P", t)
    again.run()
    assert again.rows("R") == [(1, 2), (1, 3), (2, 3)]
    with pytest.raises(TypeError):
        prog.tuples("Name")
    pd = pytest.importorskip("pandas")
    f = prog.frame("Path", columns=["src", "dst"])
    assert list(f.columns) == ["src", "dst"] and len(f) == 3
    d = prog.frame("Deg")
    assert list(d.columns) == ["c0", "value"]


def test_contiguous_float_arrays_are_read_in_place():
    prog = tl.Program("X : real[2, 2]\nY[i] = X[i, j]\n")
    x = np.array([[1, 2], [3, 4]], dtype=np.float32)
    prog.bind("X", x)
    prog.run()
    assert prog["Y"].tolist() == [3.0, 7.0]
    # The engine reads x's own memory: its buffer is the array itself, not a copy.
    x_view = prog._native.array("X")
    assert np.shares_memory(x_view, x)
    # New values of the same shape: bound in place again, with no check and no copy.
    x2 = np.array([[0, 1], [0, 1]], dtype=np.float32)
    prog.bind("X", x2)
    prog.run()
    assert prog["Y"].tolist() == [1.0, 1.0]
    assert np.shares_memory(prog._native.array("X"), x2)
    # A strided view is copied, and still gives the right answer.
    wide = np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2]
    prog.bind("X", wide)
    prog.run()
    assert prog["Y"].tolist() == [2.0, 10.0]
    assert not np.shares_memory(prog._native.array("X"), wide)


def test_a_large_bound_array_is_not_copied_by_the_first_check():
    # In a fresh process, so that its peak memory is this run's: binding and checking a
    # 200 MB array must not hold it again (as f64 or as a second f32 buffer).
    script = """
import resource, numpy as np, tensorlogic as tl
x = np.ones(50_000_000, dtype=np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
prog = tl.Program("S = X[i]\\n")
prog.bind("X", x).run()
assert float(prog["S"]) == 5e7, prog["S"]
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    grown_mb = int(out.stdout.split()[-1])
    assert grown_mb < 100, f"peak memory grew by {grown_mb} MB"


def test_errors_render_as_html_for_notebooks():
    with pytest.raises(tl.TensorLogicError) as e:
        tl.Program("A(x) :- B(x).\n", name="n.tl").run()
    page = tl._diagnostics_html(e.value)
    assert "E0101" in page and "n.tl:1:" in page and "<pre>" in page


@pytest.mark.parametrize("engine", ["standard", "differential"])
def test_incremental_insert_remove_and_commit_report_the_changes(engine):
    prog = tl.Program("""
    Edge(1, 2). Edge(2, 3). Edge(3, 4). Edge(4, 5).
    Path(x, y) :- Edge(x, y).
    Path(x, z) :- Path(x, y), Edge(y, z).
    Out[x] = Path(x, y)
    """)
    prog.run_incremental(workers=2, engine=engine)
    assert len(prog.rows("Path")) == 10
    prog.remove("Edge", [(2, 3)])
    changes = prog.commit()
    assert sorted(changes["Path"]["removed"]) == [(1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)]
    assert changes["Path"]["added"] == []
    assert (1, 1.0) in changes["Out"]["added"] and (1, 4.0) in changes["Out"]["removed"]
    prog.insert("Edge", [(2, 3)])
    prog.commit()
    assert len(prog.rows("Path")) == 10
    # A value outside the domain evaluates again from scratch; the answer is the same.
    prog.insert("Edge", [(5, 6)])
    changes = prog.commit()
    assert (1, 6) in changes["Path"]["added"]
    with pytest.raises(tl.TensorLogicError):
        prog.insert("Edge", [(1, 2, 3)])
    # The session stays usable after bad input.
    prog.remove("Edge", [(5, 6)])
    assert (1, 6) in prog.commit()["Path"]["removed"]
    assert prog.no_ops() == []
    prog.remove("Edge", [(1, 5)])
    assert prog.commit() == {}
    assert prog.no_ops() == ["-Edge(1, 5)"]


def test_why_explains_a_fact_a_value_and_a_fact_that_does_not_hold():
    import tensorlogic as tl
    prog = tl.Program(
        "Parent(Alice, Bob). Parent(Bob, Carol).\n"
        "Ancestor(x, y) :- Parent(x, y).\n"
        "Ancestor(x, z) :- Ancestor(x, y), Parent(y, z).\n"
        "Kids[x] = Parent(x, y)\n")
    prog.run()
    w = prog.why("Ancestor(Alice, Carol)")
    assert w.label == "Ancestor(Alice, Carol)"
    assert "height 2" in w.detail
    assert [c.label for c in w.children] == ["Ancestor(Alice, Bob)", "Parent(Bob, Carol)"]
    assert "└─ Parent(Bob, Carol)" in str(w)
    assert "<details" in w._repr_html_()
    assert prog.why("Kids[Alice]").label == "Kids[Alice] = 1"
    assert "fails at" in str(prog.why("Ancestor(Carol, Alice)", not_=True))
    try:
        prog.why("Ancestor(Carol, Alice)")
    except tl.TensorLogicError as e:
        assert "does not hold" in str(e)
    else:
        raise AssertionError("a fact that does not hold is an error without not_")


def test_a_program_over_the_memory_budget_is_refused_not_aborted():
    # 10^10 elements: the default budget (a share of this machine's memory) refuses it
    # before anything is allocated, and the interpreter goes on.
    with pytest.raises(tl.TensorLogicError) as e:
        prog = tl.Program("N : 100000\nA : real[N, N]\nA ~ zeros\nS = A[i, j]\nS?\n")
        prog.run()
    assert "E0601" in str(e.value)
    # A training step over it too.
    with pytest.raises(tl.TensorLogicError) as e:
        prog = tl.Program("N : 100000\nA : real[N, N]\nA ~ normal(0, 1)\nLoss = A[i, j] A[i, j]\n")
        prog.train(steps=1)
    assert "E0601" in str(e.value)
    assert tl.Program("S = 2 * 3\nS?\n").run() is not None


def test_why_walks_down_the_rounds_a_run_with_provenance_recorded():
    import tensorlogic as tl
    prog = tl.Program(
        "Parent(Alice, Bob, 1). Parent(Bob, Carol, 1).\n"
        "Ancestor(x, y) :- Parent(x, y, k).\n"
        "Ancestor(x, z) :- Ancestor(x, y), Parent(y, z, k).\n")
    prog.run(provenance=True)
    w = prog.why("Ancestor(Alice, Carol)")
    assert w.detail.startswith("height 2, round 2, rule at")
    prog.run()
    assert "round" not in prog.why("Ancestor(Alice, Carol)").detail


def test_integer_tensors_are_exact_int64_arrays():
    # 2**53 + 1 has no float64: an integer tensor comes back as int64, exactly.
    prog = tl.Program("V(A, 9007199254740993). V(B, -4).\nTop[k] max= V(k, v) v\n")
    prog.run()
    top = prog["Top"]
    assert top.dtype == np.int64 and top.tolist() == [9007199254740993, -4]
