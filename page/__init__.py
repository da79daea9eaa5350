"""The web page, by job: the context, the panels and their layout, a request's way in and out, the model picks, the
event wiring, the formatting and the words, gradio hardening, the ZeroGPU contexts, and `python app.py`'s command
line. The top layer: it may import longqa, strategies and longqa_core; nothing of theirs imports it.
"""

from longqa_core.openmp_wait import limit_spin_wait

limit_spin_wait()  # before any page module loads torch, and with it libgomp, which reads its spin count once
