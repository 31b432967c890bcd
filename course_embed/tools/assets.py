"""The site's third-party assets: npm packages fetched with ``npm pack``, checked against pinned hashes, cached.

Each package in ``PACKAGES`` is taken from the npm registry at build time, its tarball checked against the integrity
hash pinned here, and unpacked into a cache outside the repository (:func:`asset_cache`; later builds reuse it).
:mod:`course_embed.tools.site` copies the files the site needs into ``_vendor/``; the browser test fetches axe-core
the same way. Nothing is committed but the table below.

    cache: $COURSE_EMBED_ASSET_CACHE, else $XDG_CACHE_HOME/course_embed/site-assets, else ~/.cache/course_embed/...
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock
from PIL import Image
from sphinx.errors import ExtensionError

VENDOR = "_vendor"


@dataclass(frozen=True)
class Package:
    """An npm package pinned by version and by the registry's integrity hash, and the files the site needs from it.

    ``files`` are glob patterns relative to the package root; a pattern that names a folder copies the whole folder.
    Each package's ``package.json`` (name, version, license) and license text travel with its files.
    """

    name: str
    version: str
    integrity: str
    files: tuple[str, ...]

    @property
    def folder(self) -> str:
        """Folder name in the cache and under ``_vendor/``, e.g. ``jupyter-widgets-html-manager-1.0.15``."""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}"

    def url(self, path: str) -> str:
        """Site-root-relative URL of ``path`` inside this package, e.g. ``_vendor/mathjax-3.2.2/es5/...``."""
        return f"{VENDOR}/{self.folder}/{path}"


PACKAGES = {
    # MathJax 3, the version Sphinx loads from a CDN by default; the combined TeX + MathML component with the CHTML
    # fonts, the TeX extensions it autoloads, and the accessibility modules its menu loads on demand.
    "mathjax": Package(
        "mathjax",
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        (
            "package.json",
            "LICENSE",
            "es5/tex-mml-chtml.js",
            "es5/input",
            "es5/output/chtml",
            "es5/a11y",
            "es5/sre",
            "es5/ui",
        ),
    ),
    # The loader that the ipywidgets embedder needs (myst-nb's default setup: require.js + embed-amd.js).
    "requirejs": Package(
        "requirejs",
        "2.3.8",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
        ("package.json", "require.js"),
    ),
    # Renders the widget state stored in a notebook (ipywidgets 8 protocol) on a static page; its fonts sit beside it.
    "html-manager": Package(
        "@jupyter-widgets/html-manager",
        "1.0.15",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        (
            "package.json",
            "dist/embed.js.LICENSE.txt",
            "dist/embed-amd.js",
            "dist/*.woff2",
            "dist/*.woff",
            "dist/*.ttf",
            "dist/*.eot",
            "dist/*.svg",
        ),
    ),
    # The icons of matplotlib's animation controls (to_jshtml links Font Awesome 4 from a CDN).
    "font-awesome": Package(
        "font-awesome",
        "4.7.0",
        "sha512-U6kGnykA/6bFmg1M/oT9EkFeIYv7JlX3bozwQJWiiLz6L0w3F5vBVPxHlwyX/vtNq1ckcpRKOB9f2Qal/VtFpg==",
        ("package.json", "README.md", "css", "fonts"),
    ),
}

MATHJAX_JS = PACKAGES["mathjax"].url("es5/tex-mml-chtml.js")
WIDGET_JS = (PACKAGES["requirejs"].url("require.js"), PACKAGES["html-manager"].url("dist/embed-amd.js"))

# Remote files that notebook outputs link to, and the local copy each is replaced with.
LOCAL_COPIES = {
    "https://maxcdn.bootstrapcdn.com/font-awesome/4.4.0/css/font-awesome.min.css": PACKAGES["font-awesome"].url(
        "css/font-awesome.min.css"
    ),
}


class AssetError(ExtensionError):
    """A package the site serves could not be fetched, verified or unpacked."""


def asset_cache() -> Path:
    """The folder that holds unpacked packages, outside the repository."""
    if os.environ.get("COURSE_EMBED_ASSET_CACHE"):
        return Path(os.environ["COURSE_EMBED_ASSET_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "course_embed" / "site-assets"


def _integrity(path: Path) -> str:
    """The npm integrity string (``sha512-<base64>``) of a file."""
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch(package: Package, cache: Path | None = None) -> Path:
    """Return the unpacked ``package`` in the cache, fetching it with ``npm pack`` the first time.

    The tarball must match ``package.integrity``; unpacking is atomic, so a failed or concurrent fetch never leaves
    a half-filled folder. Raises ``AssetError`` naming the package, the cache and the fix.
    """
    cache = asset_cache() if cache is None else cache
    dest = cache / package.folder
    if (dest / "package.json").is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"{package.name}@{package.version}"
    with FileLock(str(cache / ".lock")):
        if (dest / "package.json").is_file():  # fetched by a concurrent build while we waited
            return dest
        npm = shutil.which("npm")
        if npm is None:
            raise AssetError(
                f"cannot fetch {spec} for the offline site: npm is not installed and {dest} is not "
                "cached; install Node.js and npm (Debian: apt-get install npm) and build again"
            )
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            try:
                proc = subprocess.run(
                    [npm, "pack", spec, "--json", "--prefer-offline", "--pack-destination", tmp],
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
            except subprocess.TimeoutExpired:
                proc = None
            if proc is None or proc.returncode != 0:
                detail = "timed out after 600 s" if proc is None else proc.stderr.strip()[-800:]
                raise AssetError(
                    f"cannot fetch {spec} from the npm registry ({detail}), and {dest} is not cached. "
                    "The site serves MathJax and the widget scripts itself: connect to the npm registry "
                    "once (later builds reuse the cache), or set COURSE_EMBED_ASSET_CACHE to a folder "
                    f"that holds {package.folder}/"
                )
            tarball = Path(tmp) / json.loads(proc.stdout)[0]["filename"]
            if (got := _integrity(tarball)) != package.integrity:
                raise AssetError(
                    f"{spec}: the registry's tarball has integrity {got}, not the pinned "
                    f"{package.integrity}; refusing to serve it. Check the package, then update "
                    "PACKAGES in course_embed/tools/assets.py"
                )
            unpacked = Path(tmp) / "unpacked"
            with tarfile.open(tarball) as tar:
                tar.extractall(unpacked, filter="data")
            (unpacked / "package").rename(dest)
    return dest


def copy_package(package: Package, source: Path, outdir: Path) -> list[Path]:
    """Copy the files ``package.files`` names from ``source`` (an unpacked package) to ``outdir/_vendor``.

    Returns the copied top-level paths. Raises ``AssetError`` if a pattern matches nothing (the pinned package
    changed layout).
    """
    target = outdir / VENDOR / package.folder
    copied = []
    for pattern in package.files:
        matches = sorted(source.glob(pattern))
        if not matches:
            raise AssetError(
                f"{package.name}@{package.version} has no {pattern!r} in {source}; fix PACKAGES in "
                "course_embed/tools/assets.py"
            )
        for path in matches:
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(path, dest)
            copied.append(dest)
    return copied


#: A figure may lose colours, never visible detail: its palette copy must stay this close to it (peak signal-to-noise
#: ratio over the RGBA values; 40 dB is an average error of about 2.5 levels of 255, invisible in a plot).
LEAST_PSNR_DB = 40.0


def _psnr(a: Image.Image, b: Image.Image) -> float:
    """The peak signal-to-noise ratio, in dB, of ``b`` against ``a`` (both compared as RGBA; inf when equal)."""
    x = np.asarray(a.convert("RGBA"), dtype=np.float64)
    y = np.asarray(b.convert("RGBA"), dtype=np.float64)
    mse = float(((x - y) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def smaller_png(data: bytes, least_psnr: float = LEAST_PSNR_DB) -> bytes:
    """``data`` (a PNG, e.g. a matplotlib figure) in fewer bytes, or ``data`` itself.

    A figure of a few flat colours and their anti-aliased edges takes a quarter of its size as a palette image of at
    most 256 colours. The smallest of Pillow's quantisers (median cut, maximum coverage, fast octree; without
    dithering, which would add noise to flat areas) is kept if it is within ``least_psnr`` of the original;
    otherwise the lossless re-encoding, if that is smaller. Deterministic: the same figure gives the same bytes.
    """
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except OSError:
        return data

    def encode(picture: Image.Image) -> bytes:
        out = io.BytesIO()
        picture.save(out, "PNG", optimize=True)
        return out.getvalue()

    candidates = [encode(image)]
    if image.mode not in {"P", "L", "1"}:
        rgba = image.convert("RGBA")
        opaque = rgba.getextrema()[3][0] == 255
        source = rgba.convert("RGB") if opaque else rgba
        methods = [Image.Quantize.MEDIANCUT, Image.Quantize.MAXCOVERAGE] if opaque else []
        for method in [*methods, Image.Quantize.FASTOCTREE]:
            palette = source.quantize(256, method=method, dither=Image.Dither.NONE)
            if _psnr(rgba, palette) >= least_psnr:
                candidates.append(encode(palette))
    best = min(candidates, key=len)
    return best if len(best) < len(data) else data
