"""`make plots`: `dvc plots show` on a machine without a network. DVC's own page loads vega, vega-lite and
vega-embed from a CDN, so offline it stays blank. Here the three libraries come from the pinned PyPI package
vl-convert-python (one bundle, `javascript_bundle()`, exposing vega, vegaLite and vegaEmbed on window; chosen
over the npm registry because it installs with the rest of the venv and needs no Node.js), written beside the
page, and DVC fills an HTML template that loads that file instead of the CDN.

    python -m itervision.reporting.offline_plots [--out dvc_plots]     # then open dvc_plots/index.html
    python -m itervision.reporting.offline_plots --rev main~2          # the workspace against a revision
                                                                       # (`dvc plots diff`: both drawn, a line
                                                                       # style per revision)
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from itervision.errors import ArgumentParser, UserError, cli_entry
from itervision.io import write_text

BUNDLE = "vega-bundle.js"
TEMPLATES = Path(".dvc/plots")
# No {scripts} placeholder: DVC would put its CDN <script> tags there.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>itervision plots (offline)</title>
<script src="BUNDLE"></script>
<style>body { font-family: sans-serif; margin: 1rem; } div.vega-embed { margin: 1rem 0; max-width: 100%; }</style>
</head>
<body>
<h1>itervision plots</h1>
<p>Every <code>plots:</code> entry of dvc.yaml, drawn with the Vega libraries bundled in vl-convert-python
(no network).</p>
{plot_divs}
</body>
</html>
""".replace("BUNDLE", BUNDLE)


def vega_lite_version(templates: Path = TEMPLATES) -> str:
    """The newest Vega-Lite version vl-convert bundles of the major the plot templates declare ($schema)."""
    import vl_convert as vlc

    majors = {m for f in templates.glob("*.json") for m in re.findall(r"vega-lite/v(\d+)\.json", f.read_text())}
    major = max(majors, default="5")
    versions = [v for v in vlc.get_vegalite_versions() if v.split(".")[0] == major]
    if not versions:
        raise UserError(f"vl-convert-python bundles no Vega-Lite {major}.x (the templates in {templates} declare it); "
                        f"pin a vl-convert-python that does")
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))


def write_page(out: Path) -> Path:
    """The bundle and the template in `out`; returns the template's path."""
    import vl_convert as vlc

    out.mkdir(parents=True, exist_ok=True)
    write_text(out / BUNDLE, vlc.javascript_bundle(vl_version=vega_lite_version()))
    template = out / ".template.html"
    write_text(template, PAGE)
    return template


@cli_entry
def main(argv=None):
    ap = ArgumentParser(prog="python -m itervision.reporting.offline_plots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="dvc_plots", help="folder of the page (default dvc_plots)")
    ap.add_argument("--rev", action="append", default=[], metavar="REV",
                    help="draw the workspace against this git revision or DVC experiment (dvc plots diff; repeat "
                         "for several)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    template = write_page(out)
    what = ["diff", *args.rev] if args.rev else ["show"]
    r = subprocess.run([sys.executable, "-m", "dvc", "plots", *what, "--html-template", str(template), "-o",
                        str(out)], capture_output=True, text=True)
    if r.returncode:
        last = ((r.stderr or r.stdout).strip().splitlines() or ["no output"])[-1]
        raise UserError(f"dvc plots {what[0]} failed: {last}")
    against = f" (the workspace against {', '.join(args.rev)})" if args.rev else ""
    print(f"{out / 'index.html'}: every dvc plot{against}, no network needed (open it in a browser)")


if __name__ == "__main__":
    main()
