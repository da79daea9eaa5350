"""The benchmark (`python -m longqa bench`): `runner` plans the rows and starts one process per row, `worker`
measures one row in that process on `documents` (made-up facts among the bundled samples' sentences), `report`
turns rows into ratios against the fp32 reference, predictions, Markdown and a chart. Our own engineering's
measurements are the workshop's (`bench/` at the top, not installed: `python -m bench floor` puts these rows beside
the CPU's compute floor).

May import the request path (`longqa.loader`, `longqa.models`, `longqa.session`, `longqa.arguments`), the demo
model's fact template, `strategies` and `longqa_core`; never the serving package, the page or the workshop.
"""
