"""examples/python run as a user would run them."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EX = os.path.join(ROOT, "examples", "python")


def run(script, url, *args, **popen):
    env = dict(os.environ, DBLOCK_URL=url,
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, os.path.join(EX, script)] + list(args), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def test_cron_singleton_runs_once_among_four(url):
    """Four copies started at once: exactly one runs the report."""
    procs = [run("cron_singleton.py", url, "1.0") for _ in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    print("".join(outs))
    assert all(p.returncode == 0 for p in procs), outs
    assert sum("running the report, fence" in o for o in outs) == 1
    assert sum("nothing to do" in o for o in outs) == 3


@pytest.mark.parametrize("backend", ["postgres", "mysql"])  # (SQLite's check: the C API)
def test_worker_pool_fenced_writes(url):
    p = run("worker_pool.py", url, "200", "4")
    out = p.communicate(timeout=120)[0]
    print(out)
    assert p.returncode == 0, out
    assert "REFUSED by the database" in out and "no update lost or doubled" in out
