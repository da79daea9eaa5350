"""The workshop's measurements of our own engineering, beside the product: the CPU's compute floor (`floor`, and
`floor_report`: a `longqa bench` run's rows beside it), where one window's time goes (`window_profile`), the cpu
stack's levers (`levers`), CPU seconds against the floors (`cpu_seconds`), the band kernels side by side
(`band_kernels`, `kernel_revisions`: a kernel as it was at a git revision), the first answer (`first_answer`), the
reading curve (`reading_sweep`), streaming's cost (`streaming`), one window through the `cpu` profile and its peers
(`peers`, and `peers_report`: its ratios and table), the record each writes (`measured`), and crowds and attacks
against a served page (`crowd/`). `python -m bench NAME` runs one.

Imported only by `scripts/` and `tests/`, never by the product (`longqa_core`, `strategies`, `longqa`, `page`); not
in the wheel. May import the product, `evals` and `training`.
"""
