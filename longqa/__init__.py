"""The composition layer: puts the core and the strategies together into what people run.

The request path lives here at the top, where a newcomer looks first: `models` (which checkpoint), `loader` (the
only `from_pretrained`), `backend` (the interface the page talks to), `session` (the embedded backend: one loaded
model, a request planned then answered), `readout` (what an answer reports, typed; JSON only at the edges),
`gpu_plan` and `article_check` (what would fit on a machine you do not have, and the article's advice beside it),
`compare` (one question under several profiles in turn), `arguments` and `cli` (`python -m longqa`). The jobs
beside it are subpackages: `serving/` (many visitors: the lane, uploads, Ray Serve replicas), `bench/` (the
strategy table for the user's own machine) and `demo_model/` (the bundled model's weights, tokenizer and its
question's form). Imports go one way: `demo_model` <- the request path <- `serving`, `bench` <- `cli`; all of them
may import `strategies` and `longqa_core`, none imports the page or the workshop beside the packages (`bench/`,
`evals/`, `training/` at the top: measurements, evaluations, training).
"""
