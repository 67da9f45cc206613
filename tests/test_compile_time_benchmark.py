"""benchmarks/compile_time.py: which measurement a row reports, and bad arguments."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import compile_time  # noqa: E402


def measured(entry, run, seeds, compile_s=None, error=None):
    return {"entry": entry, "run": run, "seeds": seeds, **({"error": error} if error else {"compile_s": compile_s})}


def test_the_fastest_process_counts_and_is_compared_with_rejax_at_the_same_seeds():
    results = [
        measured("td3", "jaxrl", 1, 6.5),
        measured("td3", "rejax", 1, error="killed"),
        measured("td3", "jaxrl", 1, 6.0),
        measured("td3", "rejax", 1, 5.0),
        measured("td3", "rejax", 1, 5.5),
        measured("td3", "jaxrl", 8, error="out of memory"),
        measured("td3", "rejax", 8, 8.0),
        measured("ppo", "jaxrl", 1, 4.0),  # no rejax row: no ratio
    ]
    best = {(r["entry"], r["run"], r["seeds"]): r for r in compile_time.fastest(results)}
    assert best["td3", "jaxrl", 1]["compile_s"] == 6.0 and best["td3", "rejax", 1]["compile_s"] == 5.0
    assert best["td3", "jaxrl", 1]["rejax_ratio"] == pytest.approx(1.2)
    assert "error" in best["td3", "jaxrl", 8] and "rejax_ratio" not in best["td3", "jaxrl", 8]
    assert "rejax_ratio" not in best["ppo", "jaxrl", 1]
    assert compile_time.row(best["td3", "jaxrl", 8])[3] == "FAILED (see below)"


@pytest.mark.parametrize("argv", [["nope"], ["ppo", "--repeats", "0"], ["ppo", "--seeds", "0"]])
def test_bad_arguments_are_refused_before_anything_compiles(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compile_time.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown entry 'nope'" in err or "must be >= 1" in err
