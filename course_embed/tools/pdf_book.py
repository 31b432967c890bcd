"""What the browser runs to print the book (``course_embed.tools.pdf``): the scripts that take each page's article
and put the book together, the print style, and the footer with the page number."""

# The mark at the end of a code or output line that goes on on the next printed line.
WRAP_MARK = "\u21a9"

# Runs in a page of the site before it is read: waits until MathJax has typeset and every image has loaded.
READY = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const deadline = Date.now() + %d;
  while ([...document.images].some(i => !i.complete) && Date.now() < deadline) {
    await new Promise(r => setTimeout(r, 50));
  }
}"""

# Runs in a page of the site: its article as the book will hold it, with every id under the chapter's own (``id``)
# so ids stay unique in the book, links to pages of the book (``book``: site path -> chapter id) turned into links
# inside it, links to other pages of the site dropped (a PDF cannot follow them), collapsed code cells opened and the
# animations' controls removed. Returns the chapter's id, title and sections (as HTML and as text), its HTML, and the
# style sheets the page made as it ran (MathJax's glyphs, the widgets').
CAPTURE = r"""({id, book}) => {
  const article = document.querySelector('article.bd-article').cloneNode(true);
  article.querySelectorAll('a.headerlink, .prev-next-area, .edition-switch, .translation-status, script, ' +
                           '.anim-buttons, .anim-state, input.anim-slider').forEach(e => e.remove());
  article.querySelectorAll('details.hide, details.above-input, details.below-input').forEach(d => d.open = true);
  article.querySelectorAll('[id]').forEach(e => { e.id = id + '--' + e.id; });
  for (const a of article.querySelectorAll('a[href]')) {
    const url = new URL(a.getAttribute('href'), location.href);
    if (url.origin !== location.origin) continue;
    const path = decodeURIComponent(url.pathname);
    const chapter = path === location.pathname ? id : book[path];
    if (chapter) {
      a.setAttribute('href', '#' + (url.hash ? chapter + '--' + decodeURIComponent(url.hash.slice(1)) : chapter));
    } else {
      a.removeAttribute('href');
    }
  }
  article.querySelectorAll('img[src]').forEach(i => i.setAttribute('src', i.src));
  // A heading as plain text (a bookmark's title): its mathematics as MathJax read it, in a few TeX words' symbols.
  const symbols = {'\\sqrt': '√', '\\times': '×', '\\cdot': '·', '\\approx': '≈', '\\le': '≤', '\\ge': '≥',
                   '\\to': '→', '\\infty': '∞', '\\theta': 'θ', '\\alpha': 'α', '\\pm': '±', '\\ell': 'ℓ'};
  const tex = t => t.replace(/\\[a-zA-Z]+/g, w => symbols[w] ?? '').replace(/\\[,;:! ]/g, ' ')
                    .replace(/[{}]/g, '').replace(/\s+/g, ' ').trim();
  const items = window.MathJax && MathJax.startup && MathJax.startup.document ? MathJax.startup.document.math : [];
  const source = new Map([...items].map(m => [m.typesetRoot, m.math]));
  const text = h => {
    const copy = h.cloneNode(true), maths = [...h.querySelectorAll('mjx-container')];
    copy.querySelectorAll('mjx-container').forEach((m, i) => m.replaceWith(tex(source.get(maths[i].original) || '')));
    return copy.textContent.replace(/\s+/g, ' ').trim();
  };
  const original = [...document.querySelectorAll('article.bd-article mjx-container')];
  [...article.querySelectorAll('mjx-container')].forEach((m, i) => { m.original = original[i]; });
  const h1 = article.querySelector('h1');
  // A section's id moves to its heading: a link, a bookmark or the contents lands on the heading's page even when
  // the section begins at the foot of the page before.
  const heading = h => {
    const section = h.closest('section[id]');
    if (section && section.firstElementChild === h) { h.id = section.id; section.removeAttribute('id'); }
    return {id: h.id || id, level: Number(h.tagName[1]), html: h.innerHTML, text: text(h)};
  };
  const outline = [...article.querySelectorAll('h1, h2, h3')].map(heading);
  outline.forEach(h => { if (h.level === 1) h.id = id; });
  const sections = outline.filter(h => h.level === 2);
  const styles = [...document.styleSheets].filter(s => s.ownerNode && s.ownerNode.tagName === 'STYLE')
    .map(s => { try { return [...s.cssRules].map(r => r.cssText).join('\n'); } catch (e) { return ''; } });
  return {id, title_html: h1 ? h1.innerHTML : document.title, sections, outline, html: article.innerHTML, styles};
}"""

# Runs in the first page of the site: the article becomes the book (``front``: title page and contents; ``body``:
# the chapters), the document takes the book's title and the print style.
ASSEMBLE = """({front, body, title, css}) => {
  document.querySelectorAll('script').forEach(s => s.remove());
  const article = document.querySelector('article.bd-article');
  article.innerHTML = front + body;
  const style = document.createElement('style');
  style.textContent = css;
  document.head.appendChild(style);
  document.title = title;
  document.documentElement.classList.add('printed-book');
}"""

# Runs in the assembled book, laid out for print: every line of a code block or output longer than its block holds
# is cut at the block's width, with the mark (the argument) at the end of each cut; wide (CJK) characters count as
# two columns. Returns how many lines were wrapped.
WRAP = """(mark) => {
  let wrapped = 0;
  const wide = c => /[\\u1100-\\u115f\\u2e80-\\ua4cf\\uac00-\\ud7a3\\uf900-\\ufaff\\ufe30-\\ufe4f]/.test(c) ||
                    /[\\uff00-\\uff60\\uffe0-\\uffe6]/.test(c) ? 2 : 1;
  for (const pre of document.querySelectorAll('article pre')) {
    const probe = document.createElement('span');
    probe.textContent = '0'.repeat(100);
    pre.appendChild(probe);
    const ch = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const style = getComputedStyle(pre);
    const inner = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const columns = Math.floor(inner / ch) - 2;  // room for the mark
    if (!(columns >= 20)) continue;
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    let column = 0;
    for (const node of nodes) {
      const parts = [];
      let piece = '';
      for (const c of node.data) {
        if (c === '\\n') { column = 0; piece += c; continue; }
        if (column + wide(c) > columns) { parts.push(piece); piece = ''; column = 0; wrapped += 1; }
        piece += c;
        column += wide(c);
      }
      if (!parts.length) continue;
      const fragment = document.createDocumentFragment();
      for (const part of parts) {
        fragment.append(part);
        const span = document.createElement('span');
        span.className = 'wrap-mark';
        span.textContent = mark;
        fragment.append(span, '\\n');
      }
      fragment.append(piece);
      node.replaceWith(fragment);
    }
  }
  return wrapped;
}"""

# The page number, centred under every page (Chromium fills in ``pageNumber``).
FOOTER = (
    '<div style="width: 100%; text-align: center; font-size: 9pt; color: #444; font-family: sans-serif;">'
    '<span class="pageNumber"></span></div>'
)

# The book's print style: only the article prints; a title page and the contents open the book; each page of the
# site starts a new printed page, its sections do not; code and outputs keep every character (``WRAP`` cuts the
# long lines; a line the browser would still find too long wraps rather than leaving the page).
BOOK_CSS = """
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer, .bd-footer-article,
.bd-footer-content, footer, .skip-link, .search-button-field, #pst-back-to-top, .header-article-items,
.prev-next-area, .pst-async-banner-revealer, #jb-print-docs-body { display: none !important; }
.bd-main, .bd-content, .bd-article-container, .bd-article, .bd-page-width, .bd-container, .bd-container__inner {
  display: block !important; max-width: none !important; width: auto !important; margin: 0 !important;
  padding: 0 !important; }
.book-title-page { break-after: page; text-align: center; padding-top: 70mm; }
.book-title { font-size: 30pt; font-weight: bold; margin-bottom: 12mm; }
.book-author, .book-year { font-size: 14pt; }
.book-contents ol { list-style: none; padding-left: 0; margin: 0; }
.book-contents li.toc-1 { margin-top: 0.6em; font-weight: bold; }
.book-contents li.toc-2 { font-weight: normal; padding-left: 1.5em; font-size: 0.95em; }
.book-contents a { display: flex; align-items: baseline; gap: 0.5em; color: inherit; text-decoration: none; }
.book-contents .toc-title { flex: 1; }
.book-contents .toc-page { flex: 0 0 3em; text-align: right; }
section.book-page { break-before: page; }
.bd-main .bd-content .bd-article h1 { display: block !important; }  /* the theme hides a page's first h1 */
h1, h2, h3, h4 { break-after: avoid; }
figure, img, .cell_output img, tr, mjx-container[display="true"] { break-inside: avoid; }
table { break-inside: auto !important; }
article pre { white-space: pre-wrap !important; overflow-wrap: anywhere; overflow: visible !important;
  font-size: 8pt !important; line-height: 1.35; max-height: none !important; }
div.highlight, div.output, .cell_output, .cell_input { overflow: visible !important; max-height: none !important; }
.wrap-mark { color: #888; }
td code.docutils.literal, td code.docutils.literal span.pre { overflow-wrap: normal !important;
  word-break: normal !important; }
"""
