"""pytest fixtures for the binding's suite (make check runs it through
tests/check-python.sh against the private servers): the backend x strategy
pairs, fresh lock names, and the cmocka-style tally the test command adds
up."""
import os
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("DBLOCK_LIBRARY", os.path.join(ROOT, os.environ.get("DBLOCK_TEST_TREE", "build"),
                                                     "libdblock.so.0"))

import dblock  # noqa: E402

BACKENDS = ("sqlite", "postgres", "mysql")
# (make check-quick: the pair tests on two of the three strategies —
# optimistic shares insert's leased paths; make check runs all three)
STRATEGIES = ("insert", "for_update") if os.environ.get("DBLOCK_TEST_QUICK") else \
    ("insert", "for_update", "optimistic")
_ENV = {"postgres": "DBLOCK_TEST_PG_URL", "mysql": "DBLOCK_TEST_MY_URL"}


def backend_url(backend, tmp_dir):
    """The URL of a backend's private server (SQLite: a file in tmp_dir),
    or a skip naming the variable that is not set."""
    if backend == "sqlite":
        return "sqlite://" + os.path.join(tmp_dir, "py.db")
    url = os.environ.get(_ENV[backend])
    if not url:
        pytest.skip("no %s server: %s is not set (make check sets it)" % (backend, _ENV[backend]))
    return url


@pytest.fixture(scope="session")
def tmp_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("dblock"))


_migrated = set()


def open_client(url, **kw):
    c = dblock.Client(url, **kw)
    if (url, kw.get("table")) not in _migrated:
        c.migrate()
        _migrated.add((url, kw.get("table")))
    return c


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(params=[(b, s) for b in BACKENDS for s in STRATEGIES], ids=lambda p: "%s-%s" % p)
def pair(request):
    return request.param


@pytest.fixture
def url(backend, tmp_dir):
    return backend_url(backend, tmp_dir)


@pytest.fixture
def pair_url(pair, tmp_dir):
    return backend_url(pair[0], tmp_dir)


@pytest.fixture
def name():
    """A lock name no other test uses."""
    return "py-" + uuid.uuid4().hex[:16]


@pytest.fixture
def clients():
    """Opens clients for a test and closes them after it."""
    opened = []

    def make(url, **kw):
        c = open_client(url, **kw)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


def _shard():
    """The backends this run covers: DBLOCK_TEST_BACKEND (run-suites.sh
    runs one pytest per backend side by side, as it does the cmocka
    suites: "sqlite,none", "postgres", "mysql"), else all three."""
    env = os.environ.get("DBLOCK_TEST_BACKEND")
    return set(env.split(",")) if env else set(BACKENDS) | {"none"}


def pytest_collection_modifyitems(config, items):
    """Leaves out the tests of the backends this run does not cover (a
    test on no backend goes with SQLite's: "none"), and in make
    check-quick the leak test."""
    shard = _shard()
    keep, drop = [], []
    quick = os.environ.get("DBLOCK_TEST_QUICK")
    for item in items:
        if quick and os.path.basename(str(item.fspath)) == "test_leak.py":
            drop.append(item)  # (make check-quick: the 10,000-cycle runs are make check's)
            continue
        params = getattr(item, "callspec", None)
        params = params.params if params else {}
        b = params.get("backend") or (params.get("pair") or ("none",))[0]
        (keep if b in shard else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    """The tally tests/run-suites.sh adds up, in cmocka's words."""
    st = terminalreporter.stats
    passed = len(st.get("passed", []))
    failed = len(st.get("failed", [])) + len(st.get("error", []))
    skipped = len(st.get("skipped", []))
    w = terminalreporter.write_line
    w("[  PASSED  ] %d test(s)." % passed)
    w("[  SKIPPED ] %d test(s)." % skipped)
    if failed:
        w("[  FAILED  ] %d test(s), listed below:" % failed)
        for r in st.get("failed", []) + st.get("error", []):
            w("[  FAILED  ] %s" % r.nodeid)
