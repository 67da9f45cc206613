"""benchmarks/gpu.py --quick: the GPU benchmark's code, run on the CPU at tiny budgets."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_gpu_benchmark_quick_writes_every_row(tmp_path):
    markdown = tmp_path / "gpu.md"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--quick", "--markdown", str(markdown)],
        capture_output=True,
        text=True,
        timeout=600,
        # LLVM at -O0, as the suite compiles: this checks the code, not its speed.
        env={**os.environ, "JAX_DISABLE_MOST_OPTIMIZATIONS": "true"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = markdown.read_text()
    assert text.startswith("### Training throughput on ")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith(("| jaxrl ", "| floor "))]
    for entry in ("ppo-2048-envs", "ppo-minatar", "dqn-128-envs", "sac-64-envs"):
        for run in ("jaxrl", "floor"):
            (cells,) = [cells for cells in rows if cells[0] == f"| {run}" and cells[1] == entry]
            assert float(cells[4]) > 0 and float(cells[7].replace(",", "")) > 0, cells  # compile s, steps/s
    assert "FAILED" not in text
