// MathJax 3's configuration, read when assets/mathjax/tex-chtml-full.js loads (a local copy of MathJax 3.2.2
// from the pinned PyPI package django-static-mathjax; tools/build_site.py copies it): $...$ and \(...\) inline,
// $$...$$ and \[...\] displayed, as in Jupyter. Code, pre and outputs are skipped (MathJax's default).
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    // The menu's speech and Braille options would load the speech-rule engine, which the site does not ship.
    menuOptions: { settings: { assistiveMml: false, collapsible: false, explorer: false } },
  },
};
