"""The memory strategies, one module each, composed by the profiles (`profiles`, `registry`, `auto`), and what
plans for a machine: its hardware, the memory planner, the named GPUs, the device map. A strategy changes how the
model is loaded and run; it reads no document and knows nothing of the engine's requests or the page."""
