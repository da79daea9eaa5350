"""The engine core: reading documents, planning a request, cutting windows, running a model over them, decoding
answer spans, measuring memory and time, and the errors all of these raise. It knows nothing of strategies,
profiles, loading or the page: a model, a tokenizer and settings are handed to it. Imports only the libraries.

One request goes documents -> plan -> answering (windows, batching, reading, spans) -> QAResult. The modules, and
the public names of each:

- `documents`: what a document is (`Document`, `from_text` for pasted text, `DEFAULT_MAX_FILE_BYTES`), `clean_text`,
  the cleaning every reader's text and a question go through (`paged_text`: with the pages its form feeds end),
  where a stretch of text stands (`Location`, `locate`, `format_location`: page, heading, line; `Heading`), and
  one document's reading limits (`ReadLimits`,
  `DEFAULT_MAX_PAGES`, `DEFAULT_MAX_READ_S`); `files`: reading a file (`read_document`, `SUPPORTED_EXTENSIONS`):
  the size and extension checks and the reader for each kind: `text_files` (`decode_text`,
  `UnknownEncodingError`, `markdown_headings`), `pdf_files` (`read_pdf_file`) and `html_files` (`read_html_file`),
  every reader's text flowing as a person reads it (`text_flow`: `flow_text`, `flow_lines`, `Line`, `LineMap`;
  wrapped lines and hyphens joined, running headers and footers left out), a PDF page's pieces in reading order
  (`pdf_layout`: `Segment`, `page_lines`; columns, paragraphs, headings), whose parsers run in the children of
  `reader_children` (`ReaderChildren` and its one instance `READERS`: so many
  at once, one memory budget; `read_in_child`), all within one document's `ReadLimits`.
- `limits`: `EngineSettings` (windows, batch, limits, the time budget) and the checks made before any model work
  (`validate_request`, `check_chars`, `check_tokens`, `check_predicted_time`, `max_chars_for`, `whole_number`).
- `plan`: `plan_request` reads and plans a request once into a picklable `RequestPlan` (question as cut, sizes,
  the reading, the expected windows) that the lane, ZeroGPU, the preview and the engine all read.
- `windows`: the model's inputs (`make_windows`, `Window`, `DocumentStats`), the same windows cut from a document's
  tokens kept once (`tokenize_document`, `window_cuts`, `cut_windows`) and token counts (`count_tokens`,
  `count_windows`, `chars_per_token`).
- `batching`: `iter_windows` (batches, stop checks, out-of-memory back-off; a step after each batch) and
  `run_windows` (read to its end, `drain`), `ModelRunner`, `collate`,
  `stack_batches`/`split_rows` for shared passes, and `BatchState`: a loaded model's batch size and its one
  throughput estimate (`window_s`, `tokens_per_s`).
- `reading`: question-guided reading: the ranking of the full read's windows, its `ReadingPlan` (mode, reason
  code and text, rounds) and `read_rounds` / `read_windows`, the loops that read those rounds and the windows left.
- `spans`: answer spans from logits (`decode_answers`, `Answer`; a window at a time: `decode_window`, `merged_answers`).
- `no_answer`: the "not found" rules (`NoAnswerRule`, `judge`, `Verdict`, `confidence`) and the evidence check
  (`Evidence`, `answer_neighbourhood`).
- `ranker`: the one module that knows the ranker is BM25 (bm25s): `PassageIndex` (`score`, `nbytes`,
  `vocabulary`), `index_passages`, and the content words (`STOPWORDS`, `content_words`, `question_words`) that the
  ranking and the evidence check share.
- `answering`: `answer_steps` answers a plan into a `QAResult` (with `ReadingReadout`), yielding the best answer so
  far after each batch (`BestSoFar`, `Provisional`); `answer_plan` reads it to its end; `answer` plans and answers.
- `telemetry`: `measure` (latency by stage, `MemoryReadout`), `HostPeak`, `timed`, `current_rss_bytes`; handing
  freed memory back to the system (`trim_heap`), a server's memory settings (`tune_allocator`, `freeze_start_up`)
  and a CPU forward's large buffers kept for the next (`keep_large_buffers`).
- `gpu_devices`: the NVML wrapper (`nvml`, `nvml_handle`, `device_memory`, `gpu_snapshot`, `cuda_device_indices`).
- `openmp_wait`: how long idle OpenMP threads spin (`limit_spin_wait`), set by the entry points before torch loads.
- `waiting`: `wait_until`, the one loop with which a request waiting for something (an index another request builds,
  a turn in line, a child process, a remote call) hears that it was stopped.
- `errors`: the domain errors (`InputError`, `RequestTooLongError`, `Cancelled`, `OutOfMemoryError`, ...).
- `cache`: the project's one cache folder.
"""
