"""What the Python benchmarks share: where things are, and making them ready (tl built,
bench/.venv with the peers' packages)."""
import os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, "bench", ".venv")
TL = os.path.join(ROOT, "target", "release", "tl")
PY = os.path.join(VENV, "bin", "python")


def setup(requirements):
    """Builds target/release/tl and makes bench/.venv hold every module of `requirements`
    (module name -> pip requirement), installing only the missing ones."""
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    if not os.path.exists(PY):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    for module, requirement in requirements.items():
        probe = subprocess.run([PY, "-c", f"import {module}"], capture_output=True)
        if probe.returncode != 0:
            subprocess.run([PY, "-m", "pip", "install", "-q", requirement], check=True)
