"""The engine core: reading documents, cutting windows, running a model over them, decoding answer spans,
measuring memory and time, and the errors all of these raise. It knows nothing of strategies, profiles, loading
or the page: a model, a tokenizer and settings are handed to it."""
