"""course_embed.tools.assets and site: npm packages fetched, verified, cached, copied; the site loads nothing remote."""

import base64
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import textwrap

import nbformat
import pytest

from course_embed.tools import assets, launch, site
from course_embed.tools.assets import PACKAGES, AssetError, Package, copy_package, fetch
from course_embed.tools.site import remote_loads

from .test_notebooks import ROOT, toc_files


def _tarball(files: dict[str, str]) -> bytes:
    """An npm-style tarball: every file under ``package/``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def fake_npm(tmp_path, monkeypatch):
    """Puts an ``npm`` on PATH whose ``pack`` writes a given tarball (or fails); returns a setter and a call log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "npm-calls.txt"
    bin_dir.mkdir()
    tarball = tmp_path / "served.tgz"
    script = bin_dir / "npm"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, pathlib, shutil, sys
        args = sys.argv[1:]
        with open({str(log)!r}, "a") as f:
            f.write(" ".join(args) + "\\n")
        served = pathlib.Path({str(tarball)!r})
        if not served.exists():
            sys.exit("npm error code ENOTFOUND: request to the registry failed")
        dest = pathlib.Path(args[args.index("--pack-destination") + 1])
        shutil.copy(served, dest / "demo-1.0.0.tgz")
        print(json.dumps([{{"filename": "demo-1.0.0.tgz"}}]))
        """)
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))

    def serve(data: bytes | None):
        if data is None:
            tarball.unlink(missing_ok=True)
        else:
            tarball.write_bytes(data)

    return serve, log


def _package(data: bytes, files=("lib",)) -> Package:
    """A package pinned to the npm integrity of ``data``, computed here independently of the module."""
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    return Package("@scope/demo", "1.0.0", digest, files)


def test_fetch_unpacks_once_then_reuses_the_cache(tmp_path, fake_npm):
    serve, log = fake_npm
    data = _tarball({"package.json": "{}", "lib/a.js": "a", "lib/fonts/f.woff": "f", "README.md": "r"})
    serve(data)
    package = _package(data)
    first = fetch(package, tmp_path / "cache")
    assert first == tmp_path / "cache" / "scope-demo-1.0.0"
    assert (first / "lib" / "fonts" / "f.woff").read_text() == "f"
    assert "pack @scope/demo@1.0.0" in log.read_text()
    serve(None)  # the registry is gone: the cache answers
    assert fetch(package, tmp_path / "cache") == first
    assert len(log.read_text().splitlines()) == 1


def test_fetch_without_registry_or_cache_says_how_to_fix_it(tmp_path, fake_npm):
    serve, _ = fake_npm
    serve(None)
    with pytest.raises(
        AssetError,
        match=r"cannot fetch @scope/demo@1\.0\.0 from the npm registry.*ENOTFOUND.*"
        r"COURSE_EMBED_ASSET_CACHE",
    ):
        fetch(_package(b"x"), tmp_path / "cache")
    assert not (tmp_path / "cache" / "scope-demo-1.0.0").exists()


def test_fetch_without_npm_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AssetError, match="npm is not installed"):
        fetch(_package(b"x"), tmp_path / "cache")


def test_fetch_refuses_a_tarball_that_does_not_match_the_pin(tmp_path, fake_npm):
    serve, _ = fake_npm
    serve(_tarball({"package.json": "{}", "lib/a.js": "tampered"}))
    package = _package(_tarball({"package.json": "{}", "lib/a.js": "a"}))
    with pytest.raises(AssetError, match="refusing to serve it"):
        fetch(package, tmp_path / "cache")
    assert not (tmp_path / "cache" / package.folder).exists()


def test_copy_package_copies_the_named_files_and_folders(tmp_path):
    source = tmp_path / "src"
    for name in ("package.json", "dist/embed.js", "dist/a.woff", "dist/b.woff", "dist/embed.js.map", "css/x.css"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(name)
    package = Package("demo", "2.0.0", "sha512-unused", ("package.json", "dist/embed.js", "dist/*.woff", "css"))
    copy_package(package, source, tmp_path / "out")
    copied = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert copied == [
        "_vendor/demo-2.0.0/css/x.css",
        "_vendor/demo-2.0.0/dist/a.woff",
        "_vendor/demo-2.0.0/dist/b.woff",
        "_vendor/demo-2.0.0/dist/embed.js",
        "_vendor/demo-2.0.0/package.json",
    ]
    with pytest.raises(AssetError, match="has no 'lib/missing.js'"):
        copy_package(Package("demo", "2.0.0", "sha512-unused", ("lib/missing.js",)), source, tmp_path / "out")


def test_remote_loads_lists_what_a_page_loads_from_other_hosts():
    page = """<html><head>
      <script src="https://cdn.example.org/mathjax.js"></script><script src="../_vendor/x.js"></script>
      <link rel="stylesheet" href="//fonts.example.com/css"><link rel="canonical" href="https://example.org/page">
      <link rel="preconnect" href="https://fonts.example.com"><link rel="stylesheet" href="../_static/a.css">
      </head><body><a href="https://arxiv.org/abs/1706.03762">paper</a><img src="http://example.org/x.png">
      <img src="data:image/png;base64,AAAA"><iframe src="https://example.org/embed"></iframe></body></html>"""
    assert remote_loads(page) == [
        "<script> https://cdn.example.org/mathjax.js",
        "<link> //fonts.example.com/css",
        "<link> https://fonts.example.com",
        "<img> http://example.org/x.png",
        "<iframe> https://example.org/embed",
    ]


def test_pinned_packages_name_real_npm_integrity_hashes():
    for package in PACKAGES.values():
        assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", package.integrity), package
        assert "package.json" in package.files  # name, version and license travel with the files


def test_built_site_serves_its_own_assets(built_site):
    assert built_site.returncode == 0, built_site.log[-3000:]
    html = built_site.html
    for package in PACKAGES.values():
        meta = json.loads((html / package.url("package.json")).read_text())
        assert (meta["name"], meta["version"]) == (package.name, package.version)
    assert (html / assets.MATHJAX_JS).is_file() and all((html / path).is_file() for path in assets.WIDGET_JS)
    assert list((html / PACKAGES["mathjax"].url("es5/output/chtml/fonts/woff-v2")).glob("*.woff"))
    pages = [p for p in html.rglob("*.html") if p.relative_to(html).parts[0] not in {"_static", "_sources", "_vendor"}]
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert remote_loads(text) == [], page
        if page.relative_to(html).parts[0] == "book":
            assert "_vendor/mathjax-3.2.2/es5/tex-mml-chtml.js" in text, page  # on every page: math in the nav


def test_every_chapter_has_a_download_button(built_site):
    for entry in toc_files():
        if not (ROOT / f"{entry}.ipynb").exists():
            continue
        text = (built_site.html / f"{entry}.html").read_text(encoding="utf-8")
        download = re.search(r'href="([^"]*_sources/[^"]+\.ipynb)"', text)
        assert download, f"{entry}: no .ipynb download button"
        assert (built_site.html / entry).parent.joinpath(download.group(1)).resolve().is_file()


# What a link that was never filled in looks like: reserved example domains, template words, the old placeholder
# repository of this course and the one Jupyter Book falls back to.
PLACEHOLDER = re.compile(
    r"//(www\.)?example\.(com|org|net)\b|placeholder|your[-_]?(org|name|user|repo)|"
    r"course-embed/course_embed|executablebooks/jupyter-book|(?-i:\b(OWNER|USERNAME|TODO|XXX)\b)",
    re.IGNORECASE,
)
# Where launch and repository buttons point: each must name the configured repository.
LAUNCH_HOSTS = ("mybinder.org", "colab.research.google.com", "deepnote.com", "github.com", "gitlab.com")


def _site_links(html_root) -> dict[str, list[str]]:
    """Every href and src of every page of the built site, by page."""
    links = {}
    for page in sorted(html_root.rglob("*.html")):
        if page.relative_to(html_root).parts[0] in {"_static", "_sources", "_vendor"}:
            continue
        text = page.read_text(encoding="utf-8")
        links[page.relative_to(html_root).as_posix()] = re.findall(r'(?:href|src|action)\s*=\s*"([^"]*)"', text)
    return links


def placeholder_links(links: dict[str, list[str]], repository_url: str) -> dict[str, list[str]]:
    """The links that point at a placeholder, or a launch/repository button that does not name ``repository_url``
    (with no repository configured, there must be no such button at all)."""
    org_repo = "/".join(repository_url.rstrip("/").split("/")[-2:]) if repository_url else None
    found = {}
    for page, hrefs in links.items():
        bad = [h for h in hrefs if PLACEHOLDER.search(h)]
        for href in hrefs:
            host = re.match(r"https?://([^/]+)", href)
            launch = (
                host
                and host.group(1).removeprefix("www.") in LAUNCH_HOSTS
                and (
                    "mybinder" in href
                    or "colab" in href
                    or "deepnote" in href
                    or ("/blob/" in href and href.split("?")[0].endswith((".ipynb", ".md")))  # a page's source
                    or "/edit/" in href
                    or "/issues/new" in href  # a cited issue (/issues/123) or source file is a reference, not a button
                    or href.rstrip("/") == f"https://{host.group(1)}/{org_repo}"
                )
            )
            if launch and (org_repo is None or org_repo not in href) and href not in bad:
                bad.append(href)
        if bad:
            found[page] = bad
    return found


def test_placeholder_links_are_caught():
    links = {
        "a.html": [
            "https://github.com/course-embed/course_embed",
            "https://example.org/x",
            "../b.html",
            "https://mybinder.org/v2/gh/someone/else/main?urlpath=lab/tree/book/01.ipynb",
            "https://colab.research.google.com/github/me/course/blob/main/book/01.ipynb",
            "https://arxiv.org/abs/1706.03762",
            "https://github.com/pytorch/pytorch",
            "https://github.com/huggingface/transformers/issues/29496",  # cited: a reference, not a button
            "https://github.com/google/gemma_pytorch/blob/main/gemma/model.py",
        ]
    }
    assert placeholder_links(links, "https://github.com/me/course") == {
        "a.html": links["a.html"][:2] + [links["a.html"][3]]
    }
    assert placeholder_links(links, "")["a.html"] == links["a.html"][:2] + links["a.html"][3:5]


def test_no_link_or_button_on_the_site_points_at_a_placeholder(built_site):
    assert built_site.returncode == 0, built_site.log[-3000:]
    url, _ = launch.repository()
    links = _site_links(built_site.html)
    assert sum(map(len, links.values())) > 100  # the check saw the site's links
    assert placeholder_links(links, url) == {}


def test_launch_buttons_appear_only_for_a_configured_repository(built_site):
    url, branch = launch.repository()
    for entry in toc_files():
        if not (ROOT / f"{entry}.ipynb").exists():
            continue
        text = (built_site.html / f"{entry}.html").read_text(encoding="utf-8")
        nb = nbformat.read(ROOT / f"{entry}.ipynb", as_version=4)
        if not url:
            assert "mybinder.org" not in text and "colab.research.google.com" not in text, entry
            assert launch.install_cells(nb) == [], f"{entry}: install cell without a repository"
        else:
            org_repo = "/".join(url.split("/")[-2:])
            assert f"https://mybinder.org/v2/gh/{org_repo}/{branch}" in text, f"{entry}: no Binder button"
            assert f"https://colab.research.google.com/github/{org_repo}/blob/{branch}/{entry}.ipynb" in text, entry
            assert launch.install_cells(nb) == [(0, launch.install_source(url, branch))], (
                f"{entry}: its first cell must install the package from {url}: run python3 -m course_embed.tools.launch"
            )


def test_build_localises_cdn_links_in_outputs_and_flags_remote_loads(tmp_path):
    """A two-page Sphinx build with myst-nb: the animation controls' CDN stylesheet is rewritten to the local copy;
    an output that loads a script from another host makes the build warn (an error under -W)."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    src = tmp_path / "src"
    (src / "book").mkdir(parents=True)
    (src / "conf.py").write_text(
        'extensions = ["myst_nb", "course_embed.tools.site"]\nnb_execution_mode = "off"\n'
        'exclude_patterns = ["_build"]\n'
    )
    (src / "index.md").write_text("# Demo\n\n```{toctree}\nbook/anim\nbook/remote\n```\n")

    def notebook(name, html, alt=None):
        metadata = {"mystnb": {"image": {"alt": alt}}} if alt else {}
        nb = new_notebook(
            cells=[
                new_markdown_cell(f"# {name}\n\n$x^2$"),
                new_code_cell(
                    "HTML(...)",
                    execution_count=1,
                    metadata=metadata,
                    outputs=[new_output("display_data", data={"text/html": html})],
                ),
            ],
            metadata={"language_info": {"name": "python"}},
        )
        nbformat.write(nb, src / "book" / f"{name}.ipynb")

    fa_cdn = "https://maxcdn.bootstrapcdn.com/font-awesome/4.4.0/css/font-awesome.min.css"
    notebook(
        "anim",
        f'<link rel="stylesheet"\nhref="{fa_cdn}">\n<div class="animation">'
        '<img id="_anim_imgx">\n<input id="_anim_sliderx" type="range"></div>',
        alt='Frames of a "wave" & its phase',
    )
    notebook("remote", '<script src="https://cdn.example.org/lib.js"></script>')
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    anim = (out / "book" / "anim.html").read_text()
    assert fa_cdn not in anim and 'href="../_vendor/font-awesome-4.7.0/css/font-awesome.min.css"' in anim
    assert (out / "_vendor" / "font-awesome-4.7.0" / "css" / "font-awesome.min.css").is_file()
    assert 'src="../_vendor/mathjax-3.2.2/es5/tex-mml-chtml.js' in anim
    assert '<img alt="Frames of a &quot;wave&quot; &amp; its phase" id="_anim_imgx">' in anim
    assert '<input aria-label="Frame" id="_anim_sliderx"' in anim
    assert f"<style>{site.SITE_CSS}</style>" in anim
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "book/remote.html loads <script> https://cdn.example.org/lib.js" in warnings[0], (
        proc.stderr
    )


def test_accessible_page_fixes_what_axe_found_in_the_theme():
    page = """<html><head><title>t</title>
  <script defer src="../_static/scripts/fontawesome.js?digest=55c26ed414f5f8a31ebb"></script>
  <script defer src="../_static/scripts/bootstrap.js?digest=55c26ed414f5f8a31ebb"></script></head><body>
<button class="btn search-button-field search-button__button pst-js-only" title="Search" aria-label="Search">
 <span class="search-button__default-text">Search</span><kbd>Ctrl</kbd>+<kbd>K</kbd></button>
<button class="btn theme-switch-button" aria-label="Color mode">
  <i class="theme-switch fa-solid fa-sun fa-lg" data-mode="light" title="Light"></i></button>
<div role="list" class="citation-list"><div class="citation" id="c1" role="doc-biblioentry">A.</div></div>
<details class="admonition hide below-input"><summary aria-label="Toggle hidden content">
<p class="collapsed admonition-title">Show code cell output</p></summary></details>
</body></html>"""
    fixed = site.accessible_page(page)
    assert 'title="Search">' in fixed and 'aria-label="Search"' not in fixed
    assert 'aria-label="Color mode"' in fixed and 'data-mode="light">' in fixed and 'title="Light"' not in fixed
    assert 'role="listitem"' in fixed and "doc-biblioentry" not in fixed
    assert "<summary>" in fixed and "Toggle hidden content" not in fixed
    assert "fontawesome.js" not in fixed and "scripts/bootstrap.js" in fixed
    assert fixed.count(site.SITE_CSS) == 1 and site.accessible_page(fixed) == fixed


@pytest.mark.parametrize("url", ["", "https://github.com/someone/course_embed"])
def test_launch_buttons_follow_the_repository_url(tmp_path, url):
    """A one-notebook book with the theme's launch buttons configured: they appear only with a repository URL."""
    from nbformat.v4 import new_code_cell, new_notebook

    src = tmp_path / "src"
    src.mkdir()
    options = {
        "repository_url": url,
        "repository_branch": "main",
        "path_to_docs": "",
        "launch_buttons": {"binderhub_url": "https://mybinder.org", "colab_url": "https://colab.research.google.com"},
    }
    (src / "conf.py").write_text(
        'extensions = ["myst_nb", "course_embed.tools.site"]\nnb_execution_mode = "off"\n'
        f'html_theme = "sphinx_book_theme"\nhtml_theme_options = {options!r}\n'
        'exclude_patterns = ["_build"]\n'
    )
    nbformat.write(
        new_notebook(cells=[new_code_cell("1")], metadata={"language_info": {"name": "python"}}), src / "index.ipynb"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    page = (tmp_path / "out" / "index.html").read_text()
    assert proc.returncode == 0, proc.stderr
    if url:
        assert "https://mybinder.org/v2/gh/someone/course_embed/main" in page
        assert "https://colab.research.google.com/github/someone/course_embed/blob/main/index.ipynb" in page
    else:
        assert "mybinder.org" not in page and "colab.research.google.com" not in page


def test_edition_switch_links_a_page_to_itself_in_the_other_edition():
    from course_embed.tools.site_editions import edition_switch

    assert 'href="../zh/book/01_token_embedding.html" hreflang="zh-CN" lang="zh-CN">中文版' in edition_switch(
        "book/01_token_embedding", "en"
    )
    assert 'href="../../book/01_token_embedding.html" hreflang="en" lang="en">English edition' in edition_switch(
        "book/01_token_embedding", "zh_CN"
    )
    assert 'href="zh/search.html"' in edition_switch("search", "en")
    assert 'href="../search.html"' in edition_switch("search", "zh_CN")


def test_translate_theme_replaces_whole_attribute_values_and_texts_only():
    from course_embed.tools.site_editions import translate_theme

    words = {"Color mode": "颜色模式", "Main": "主导航", "Show code cell source": "显示代码"}
    page = (
        '<button title="Color mode" aria-label="Color mode"></button><nav aria-label="Main"></nav>'
        '<p class="collapsed"> Show code cell source </p><p>Main ideas</p><img alt="Main">'
    )
    assert translate_theme(page, words) == (
        '<button title="颜色模式" aria-label="颜色模式"></button><nav aria-label="主导航"></nav>'
        '<p class="collapsed"> 显示代码 </p><p>Main ideas</p><img alt="Main">'
    )


def test_an_animations_own_description_gives_way_to_its_cells_translated_alt_text():
    own = '<div class="animation"><img id="_anim_imgq" alt="Hands turning"><div aria-label="Hands turning"></div>'
    labelled = site.label_animation(own + '<input id="_anim_sliderq"></div>', "指针在转")
    assert 'alt="指针在转"' in labelled and 'aria-label="指针在转"' in labelled and "Hands" not in labelled
    assert site.label_animation(own, "") == own  # no cell alt text: the own description is kept


def _figure_png() -> bytes:
    """A matplotlib figure as the chapters store one: lines, text and anti-aliased edges on white."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(5, 2.5), dpi=100)
    x = np.linspace(0, 6, 200)
    for k in range(4):
        ax.plot(x, np.sin(x * (k + 1)), label=f"pair {k}")
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    ax.legend()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def test_a_figure_becomes_a_palette_png_that_looks_the_same():
    from PIL import Image

    data = _figure_png()
    smaller = assets.smaller_png(data)
    assert len(smaller) < len(data) / 2
    assert Image.open(io.BytesIO(smaller)).mode == "P"
    assert assets._psnr(Image.open(io.BytesIO(data)), Image.open(io.BytesIO(smaller))) >= assets.LEAST_PSNR_DB
    assert assets.smaller_png(data) == smaller  # the same figure gives the same bytes
    assert assets.smaller_png(smaller) is smaller  # and it is made smaller once


def test_a_photograph_keeps_its_colours():
    """Noise (a photograph's worth of colours) loses too much as a palette image: it stays as it is, or is only
    re-encoded without loss."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    smaller = assets.smaller_png(out.getvalue())
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(smaller)).convert("RGB")), pixels)
    assert assets.smaller_png(b"not a png") == b"not a png"


def test_an_animations_frames_are_made_smaller_in_place():
    """to_jshtml stores each frame as base64 in a JavaScript string, its lines ended by a backslash."""
    from PIL import Image

    data = _figure_png()
    encoded = base64.encodebytes(data).decode().replace("\n", "\\\n")
    text = f'  frames[0] = "data:image/png;base64,{encoded}"\n  frames[1] = "data:image/png;base64,{encoded}"\n'
    smaller = site.smaller_inline_pngs(text)
    frames = re.findall(r'"data:image/png;base64,([^"]*)"', smaller)
    assert len(frames) == 2 and len(smaller) < len(text) / 2
    assert Image.open(io.BytesIO(base64.b64decode(frames[0]))).mode == "P"


def test_the_search_scripts_leave_every_page_but_the_search_page():
    head = (
        '<meta charset="utf-8" />\n    <script src="../_static/searchtools.js"></script>\n'
        '    <script src="../_static/language_data.js"></script>\n    <script src="../searchindex.js"></script>\n'
        '    <script src="../_static/doctools.js?v=9a2dae69"></script>\n'
    )
    assert site.without_search_scripts(head) == (
        '<meta charset="utf-8" />\n    <script src="../_static/doctools.js?v=9a2dae69"></script>\n'
    )


def test_a_page_loads_the_tab_and_thebe_scripts_only_where_they_are_used(tmp_path):
    """A two-page book with the extensions Jupyter Book adds: sphinx-design's tab script only on the page with a tab
    set, sphinx-thebe's script and settings on no page while the launch buttons leave thebe off."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        'extensions = ["myst_nb", "sphinx_design", "sphinx_thebe", "course_embed.tools.site"]\n'
        'nb_execution_mode = "off"\nhtml_theme = "sphinx_book_theme"\nexclude_patterns = ["_build"]\n'
        'html_theme_options = {"launch_buttons": {"thebe": False}}\n'
    )
    (src / "index.md").write_text(
        "# Tabs\n\n```{tab-set}\n```{tab-item} A\none\n```\n```{tab-item} B\ntwo\n```\n```\n\n"
        "```{toctree}\nplain\n```\n"
    )
    (src / "plain.md").write_text("# Plain\n\nNo tabs here.\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    tabs, plain = ((tmp_path / "out" / f"{name}.html").read_text() for name in ("index", "plain"))
    assert "sd-tab-set" in tabs and "design-tabs.js" in tabs
    assert "design-tabs.js" not in plain
    for page in (tabs, plain):
        assert "sphinx-thebe.js" not in page and "THEBE_JS_URL" not in page
        assert "pydata-sphinx-theme.js" in page  # the theme's own scripts stay


def test_inline_math_keeps_the_punctuation_after_it_on_its_line():
    math = '<span class="math notranslate nohighlight">\\(q_i \\cdot k_j\\)</span>'
    page = f"<p>is {math}. (This {math} and {math}，中文 {math} end</p>"
    fixed = site.accessible_page(page)
    kept = f'<span class="math-tail">{math}.</span> (This {math} and <span class="math-tail">{math}，</span>中文'
    assert kept in fixed and f"{math} end" in fixed
    assert ".math-tail { display: inline-flex; align-items: baseline; max-width: 100%; white-space: nowrap; }" in (
        site.SITE_CSS
    )
    assert site.accessible_page(fixed) == fixed
