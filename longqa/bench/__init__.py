"""The benchmark (`python -m longqa bench`): `runner` plans the rows and starts one process per row, `worker`
measures one row in that process, `report` turns rows into ratios, predictions, Markdown and a chart.

May import the request path (`longqa.loader`, `longqa.models`, `longqa.arguments`), the demo task's generators,
`strategies` and `longqa_core`; never the serving package or the page.
"""
