"""A pytest plugin for the lane test (tests/test_cli.py): after collecting, print every test's node id and its
markers, one line each (`-p lane_markers`, tests/ on PYTHONPATH), so one collection serves every lane."""


def pytest_collection_finish(session):
    for item in session.items:
        print(f"LANE\t{item.nodeid}\t{','.join(sorted({m.name for m in item.iter_markers()}))}")
