"""Serving many visitors: the model lane (turns, fairness, bounds, a request's turn and its gate), the policy
(abandoned requests, an exclusive turn, the key a ZeroGPU worker finds a stop check by, ZeroGPU durations), the door
that counts a visitor's requests from before reading, the uploads on disk (caps, the gate in front of the upload
route, deletion) and Ray Serve replicas (the Ray backend). The crowds and attacks against a served app are the
workshop's (`bench/crowd/`).

May import the request path (`longqa.backend`, `longqa.session`, `longqa.readout`, `longqa.models`,
`longqa.arguments`), `strategies` and `longqa_core`; never gradio's page (`app.py`) nor the bench.
"""
