"""examples/python/mp_learner.py at a small size: a Python learner publishing to evaluator processes,
with tandem.WeightPublisher (copy overlapped with training) and with the shared-model baseline."""

import json
import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "mp_learner.py"


def test_evaluators_see_increasing_versions_byte_identical_to_what_the_learner_published(name, tmp_path):
    out = tmp_path / "mp.json"
    subprocess.run([sys.executable, str(EXAMPLE), "--params-mb", "0.5", "--steps", "24", "--publish-every", "2",
                    "--actors", "2", "--job", name, "--check", "--json", str(out)], check=True, timeout=120)
    results = {r["mode"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"tandem", "baseline"}
    for mode, r in results.items():
        assert r["publishes"] == 12, mode
        assert r["increasing"] and r["identical"], mode
        for versions in r["versions_seen"]:  # every evaluator got at least the final version
            assert versions and versions[-1] == max(max(v) for v in r["versions_seen"]), mode
