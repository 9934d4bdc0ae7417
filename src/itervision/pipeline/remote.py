"""The DVC remote around `make repro`: pull what it holds before, push what is new after, and say what really
happened: `python -m itervision.pipeline.remote pull|push`.

`dvc pull` against a local remote folder that does not exist succeeds without a word, so "pulled" has to be
read off the figures: the remote is located first (a missing local folder is named), then the counts DVC's API
returns are printed. Neither direction is ever an error of `make repro`: without a remote everything is
reproduced, and results stay in the workspace.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def default_remote(repo) -> tuple[str | None, str | None]:
    """(name, url) of the default remote, or (None, None); a relative local URL is resolved against .dvc/."""
    name = repo.config["core"].get("remote")
    if not name:
        return None, None
    url = repo.config["remote"].get(name, {}).get("url")
    if url and "://" not in url and not Path(url).is_absolute():
        url = str((Path(repo.dvc_dir) / url).resolve())
    return name, url


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def pull() -> str:
    from dvc.repo import Repo

    repo = Repo(".")
    name, url = default_remote(repo)
    if name is None:
        return "no DVC remote configured: nothing pulled (everything is reproduced)"
    if is_local(url) and not Path(url.removeprefix("file://")).is_dir():
        return f"no DVC remote folder at {url} (remote '{name}'): nothing pulled (everything is reproduced)"
    try:
        stats = repo.pull(allow_missing=True)["stats"]
    except Exception as err:  # network, credentials, a missing bucket: all mean "reproduce instead"
        return f"DVC remote '{name}' ({url}) not reachable ({type(err).__name__}): nothing pulled"
    def count(v):  # DVC reports counts or lists of paths, by version
        return v if isinstance(v, int) else len(v or [])
    fetched, added = count(stats.get("fetched", 0)), count(stats.get("added", 0)) + count(stats.get("modified", 0))
    if not fetched and not added:
        return f"DVC remote '{name}' ({url}) holds nothing the workspace lacks: nothing pulled"
    return f"pulled {fetched} files from DVC remote '{name}' ({url}); {added} outputs checked out"


def push() -> str:
    from dvc.repo import Repo

    repo = Repo(".")
    name, url = default_remote(repo)
    if name is None:
        return "no DVC remote configured: nothing pushed"
    try:
        pushed = repo.push()
    except Exception as err:
        return f"DVC remote '{name}' ({url}) not reachable ({type(err).__name__}): nothing pushed"
    return f"pushed {pushed} files to DVC remote '{name}' ({url})" if pushed else \
        f"DVC remote '{name}' ({url}) already holds every output: nothing pushed"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m itervision.pipeline.remote", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("direction", choices=("pull", "push"))
    args = ap.parse_args(argv)
    print(pull() if args.direction == "pull" else push())
    sys.exit(0)


if __name__ == "__main__":
    main()
