#!/usr/bin/env bash
# Install everything the course needs: the system packages (Debian/Ubuntu, with apt-get) and the Python requirements.
# The README's first command runs this, then builds the site. What is already present is skipped; apt-get runs
# through sudo when not root. Without apt-get (macOS, Windows, other Linux), it says what to install by hand.
#
#   a Chromium-family browser  prints the book's PDF and runs the browser test (tests/tools/test_site.py);
#                              course_embed/tools/browser.py finds chromium or Chrome, or $COURSE_EMBED_BROWSER
#   npm                        fetches the site's MathJax, widget scripts and icon font at its first build, and
#                              axe-core for the accessibility test (course_embed/tools/assets.py)
#   fonts-wqy-microhei         a CJK font, so the glossary's Chinese shows in the screenshots and the PDF
#   bubblewrap                 the sandbox that grading runs learners' notebooks in (Linux only)
#
# PYTHON (default python3) is the interpreter whose requirements are installed: run it from the virtualenv you use.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

missing=()
have_browser=""
for name in chromium chromium-browser google-chrome google-chrome-stable chrome; do
    command -v "$name" >/dev/null && have_browser=$name && break
done
if [ -n "${COURSE_EMBED_BROWSER:-}" ] && [ -f "$COURSE_EMBED_BROWSER" ]; then have_browser=$COURSE_EMBED_BROWSER; fi
[ -n "$have_browser" ] || missing+=(chromium)
command -v npm >/dev/null || missing+=(npm)
command -v bwrap >/dev/null || [ "$(uname -s)" != Linux ] || missing+=(bubblewrap)
if command -v fc-list >/dev/null; then
    fc-list | grep -qi "WenQuanYi Micro Hei" || missing+=(fonts-wqy-microhei)
elif command -v dpkg-query >/dev/null; then
    dpkg-query -W -f='${Status}' fonts-wqy-microhei 2>/dev/null | grep -q "ok installed" || missing+=(fonts-wqy-microhei)
fi

if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages: all present (browser: $have_browser)"
elif command -v apt-get >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "system packages: installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "system packages: no apt-get here; install these yourself: ${missing[*]}" >&2
    echo "  (macOS: Google Chrome and Node.js, e.g. brew install --cask google-chrome && brew install node;" >&2
    echo "   Windows: Google Chrome and Node.js; set COURSE_EMBED_BROWSER if Chrome is not found)" >&2
fi

"$PYTHON" -m pip install --quiet -r requirements.txt
