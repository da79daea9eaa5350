"""Serving many visitors: the model lane (turns, fairness, bounds), the policy the page and the Ray path share
(abandoned requests, a request's turn and its gate, ZeroGPU durations), Ray Serve replicas (the Ray backend) and the
load check of a served app.

May import the request path (`longqa.backend`, `longqa.session`, `longqa.readout`, `longqa.models`,
`longqa.arguments`), the demo task's generators,
`strategies` and `longqa_core`; never gradio's page (`app.py`) nor the bench.
"""
