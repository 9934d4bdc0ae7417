

def test_npz_files_are_byte_reproducible_and_load_as_numpy_writes_them(tmp_path, monkeypatch):
    """The same arrays written at two times give the same bytes (numpy's own savez stamps each member with the
    time, so DVC saw a new output every run), and np.load reads them back exactly."""
    import time

    import numpy as np

    from itervision.io import write_npz

    arrays = {"images": np.arange(24, dtype=np.uint8).reshape(2, 3, 4), "labels": np.array([3, 1], dtype=np.int64),
              "prob": np.linspace(0, 1, 7, dtype=np.float32)}
    for compress in (False, True):
        write_npz(tmp_path / "a.npz", arrays, compress=compress)
        t = time.time() + 3600
        monkeypatch.setattr(time, "time", lambda: t)  # an hour later, as zipfile sees it
        monkeypatch.setattr(time, "localtime", lambda *a: time.gmtime(t))
        write_npz(tmp_path / "b.npz", arrays, compress=compress)
        monkeypatch.undo()
        assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
        with np.load(tmp_path / "a.npz") as f:
            assert sorted(f.files) == sorted(arrays)
            for k, v in arrays.items():
                assert f[k].dtype == v.dtype and np.array_equal(f[k], v)
    np.savez(tmp_path / "c.npz", **arrays)  # numpy's own file: the same arrays, read the same way
    with np.load(tmp_path / "c.npz") as f, np.load(tmp_path / "a.npz") as g:
        assert all(np.array_equal(f[k], g[k]) for k in arrays)
