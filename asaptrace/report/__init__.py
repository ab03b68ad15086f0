"""The diagnostic report: one self-contained, offline HTML file (or Markdown) from a Diagnosis (docs/report.md).

``sections`` holds the types other layers use to add sections; ``advice`` (the Advice section, at
the top) and ``replay_sweep`` (the Replay and Sweep sections) and ``critical`` (the Critical path section) are
such sections; ``render.render_report``
renders it all (``templates/``).
"""
