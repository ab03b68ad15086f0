"""The diagnostic report: one self-contained, offline HTML file (or Markdown) from a Diagnosis (docs/report.md).

``render.render_report`` renders it; ``sections`` holds the types other layers use to add sections.
"""
