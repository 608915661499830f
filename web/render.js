// Markdown of a model's answer to safe DOM nodes. A model's text is untrusted: marked
// parses it with raw HTML shown as text, highlight.js colours fenced code, and the
// result passes an allowlist of tags and attributes before it reaches the page.
// Without marked (a build without Debian's libjs-marked) the answer is plain text.
"use strict";

const lpxRender = (() => {
  const TAGS = new Set(["P", "BR", "HR", "EM", "STRONG", "DEL", "CODE", "PRE", "BLOCKQUOTE",
    "UL", "OL", "LI", "H1", "H2", "H3", "H4", "H5", "H6", "TABLE", "THEAD", "TBODY", "TR",
    "TH", "TD", "A", "SPAN"]);
  // the only attributes kept, per tag; anything else (on*, style, src, ...) is dropped
  const ATTRS = { A: ["href", "title"], SPAN: ["class"], CODE: ["class"], OL: ["start"],
    TH: ["align"], TD: ["align"] };
  const SAFE_CLASS = /^(hljs[\w-]*|language-[\w+#.-]+)$/;
  const SAFE_URL = /^(https?:|mailto:|#|\.{1,2}\/|\/(?!\/))/i;

  const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

  // the languages a fence without a name is guessed among: all of highlight.js's
  // would cost tens of ms a block, each time a streamed answer is drawn again
  const GUESS = ["python", "javascript", "typescript", "bash", "shell", "c", "cpp", "java",
    "json", "xml", "css", "sql", "go", "rust", "yaml", "markdown"];

  function highlight(code, lang) {
    if (typeof hljs === "undefined") return null;
    try {
      if (lang && hljs.getLanguage(lang)) return hljs.highlight(lang, code, true).value;
      return hljs.highlightAuto(code, GUESS.filter((l) => hljs.getLanguage(l))).value;
    } catch (e) {
      return null;
    }
  }

  if (typeof marked !== "undefined") {
    marked.use({
      breaks: true, // a model's single line breaks are kept, as it wrote them
      headerIds: false, mangle: false,
      langPrefix: "hljs language-",
      highlight,
      renderer: {
        html: (raw) => escapeHtml(raw), // raw HTML in the Markdown is text, never markup
        // an image is a link to it: the page loads nothing a model names
        image: (href, title, text) => (SAFE_URL.test(href || "")
          ? '<a href="' + escapeHtml(href) + '">' + (text || escapeHtml(href)) + "</a>" : text),
      },
    });
  }

  // Keeps the allowed tags and attributes of node's subtree; a disallowed element is
  // replaced by its text.
  function clean(node) {
    for (const child of Array.from(node.childNodes)) {
      if (child.nodeType === Node.TEXT_NODE) continue;
      if (child.nodeType !== Node.ELEMENT_NODE || !TAGS.has(child.tagName)) {
        child.replaceWith(document.createTextNode(child.nodeType === Node.ELEMENT_NODE
          ? child.textContent : ""));
        continue;
      }
      const keep = ATTRS[child.tagName] || [];
      for (const a of Array.from(child.attributes)) {
        const ok = keep.includes(a.name) &&
          (a.name !== "class" || a.value.split(/\s+/).every((c) => SAFE_CLASS.test(c))) &&
          (a.name !== "href" || SAFE_URL.test(a.value.trim()));
        if (!ok) child.removeAttribute(a.name);
      }
      if (child.tagName === "A") {
        child.target = "_blank";
        child.rel = "noopener noreferrer";
      }
      clean(child);
    }
  }

  // Fills el with text rendered as Markdown (the nodes come from an inert document:
  // nothing in it runs or loads before clean() has kept only the allowed parts).
  function markdown(el, text) {
    let html = null;
    try {
      if (typeof marked !== "undefined") html = marked.parse(text);
    } catch (e) { /* a parser failure shows the text as it is */ }
    el.classList.toggle("plain", html === null);
    if (html === null) {
      el.textContent = text;
      return;
    }
    const doc = new DOMParser().parseFromString(html, "text/html");
    clean(doc.body);
    el.replaceChildren(...Array.from(doc.body.childNodes));
  }

  return { markdown, enabled: typeof marked !== "undefined" };
})();
