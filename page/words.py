"""The page's words for a first-time visitor: the introduction at the top, the glossary of every term of art the page
shows, and the short `info` lines under its controls.

Text only: no gradio, no model, no numbers (measured figures live in docs/ and the README, and the readouts show
their own). The panels place these; tests check that every term a readout shows is explained here.
"""

from __future__ import annotations

TITLE = "# Long-document question answering with Longformer"

INTRO = (  # two lines on a laptop: the Ask row stays on the first screen
    "Upload documents and ask a question: a Longformer model reads them window by window and shows the answer in "
    "its passage, with what the read cost. The bundled **demo model** knows one task: questions like *What is the "
    "&lt;attribute&gt; of &lt;name&gt;?* about sentences such as *The frequency of Chiomklian Oustklaeth is 30.* "
    "A **profile** is a recipe for one kind of machine: switch it to see what each costs."
)

TRY_LABEL = "Try it: {question}"  # the intro's one-click example

PROFILE_INFO = "A recipe for one kind of machine: how the model is loaded and run."
MODEL_INFO = "Hub models download on first use; the demo model is bundled and works offline."
MODEL_NAMES = {  # the Model dropdown's names, short enough for a phone; the info line under it says the rest
    "allenai/longformer-large-4096-finetuned-triviaqa": "Longformer-large, TriviaQA",
    "valhalla/longformer-base-4096-finetuned-squadv1": "Longformer-base, SQuAD v1",
    "mrm8488/longformer-base-4096-finetuned-squadv2": "Longformer-base, SQuAD v2",
    "demo": "demo (bundled)",
}
STRATEGIES_INFO = ("Tick the strategies to combine (they load in a fixed order). Those marked 'cannot run here' "
                   "say why; conflicting ones are refused with both names.")
TOP_K_INFO = "How many answers to list, best first (the Top answers table)."
EXAMPLES_LABEL = ("Examples: questions about the bundled sample documents, which the demo model answers offline "
                  "(a click loads the document and asks)")

# Every term of art a readout, table or control shows, in plain words. Keys are the terms as the page writes them.
GLOSSARY = {
    "profile": "a named recipe (one row of the Profiles table) combining strategies with a window, stride and "
               "batch size for one kind of machine; `auto` picks the fastest one predicted to fit here.",
    "strategy": "one technique a profile applies: a precision, a quantization, where the weights go, an attention "
                "kernel, how batches run. `custom` lets you tick your own.",
    "window": "the stretch of text the model reads at once (up to 4,096 tokens for the real checkpoints); long "
              "documents are cut into overlapping windows.",
    "token": "the unit the model reads: a word or a piece of one.",
    "guided / full reading": "full reads every window; guided reads first the windows where the question's words "
                             "point and reads more only while the answer is weak; auto chooses.",
    "score / confidence": "the model's probability for an answer span (start × end), added up over the windows "
                          "and places where the same text is found, so an answer found more than once can score "
                          "over 1. Scores are not comparable across models; confidence in words comes from the "
                          "model's not-found rule, where it has one.",
    "not found": "the documents do not hold the answer by the model's rule (the demo model: a score threshold "
                 "measured on held-out data; SQuAD 2.0 models: their null answer) or by the threshold you give.",
    "latency": "seconds from the request to the answer, by stage: extract (reading the files), tokenize, rank "
               "(guided reading), forward (the model), decode (finding the spans).",
    "tokens/s": "tokens of the documents read per second of the whole request.",
    "RSS": "resident set size: the host memory the process holds in RAM. Peak RSS is the most it held during the "
           "request or load.",
    "NVML": "NVIDIA's management library: what the GPU driver says is in use on the whole card (other processes "
            "included), beside what PyTorch itself allocated and reserved.",
    "allocated / reserved": "GPU memory PyTorch's tensors use, and what its caching allocator holds (allocated "
                            "plus cached blocks).",
    "fp32 / fp16 / bf16": "32-bit and 16-bit floating-point numbers; bf16 keeps fp32's range with fewer digits, "
                          "and is fast on GPUs from Ampere on and on CPUs with AVX-512 BF16 or AMX.",
    "int8 / NF4": "8-bit integer and 4-bit 'normal float' weights (quantization): smaller, slightly less exact.",
    "bitsandbytes": "the library that quantizes weights to int8 or NF4 as they load.",
    "autocast": "PyTorch running matrix products in 16 bits while the weights stay 32-bit.",
    "SDPA": "scaled dot-product attention: PyTorch's fused attention function, used by the fast_attention "
            "strategy in place of Longformer's slower original code.",
    "oneDNN": "Intel's library of fast CPU kernels inside PyTorch (matrix products, prepacked weights).",
    "AMX / AVX-512": "matrix and vector instructions of recent Intel and AMD CPUs that make bf16 and int8 fast.",
    "qa_outputs": "the model's last layer, which scores each token as the answer's start or end; quantization "
                  "leaves it in full precision.",
    "device map": "which device (GPU, CPU, disk) holds each layer of the model, as accelerate places them.",
    "offload": "keeping the layers that do not fit on the GPU in CPU RAM or on disk and copying them in when used.",
    "mmap": "memory-mapping the weights file, so that it is paged in as needed instead of read whole.",
    "gradient checkpointing": "recomputing activations during a training step's backward pass to save memory; "
                              "it saves nothing when only answering.",
    "batch": "windows run through the model together in one forward pass.",
    "out-of-memory back-off": "a batch that did not fit, retried at half its size.",
}


def glossary_markdown() -> str:
    """The glossary as a Markdown list, in the order above."""
    return "\n".join(f"- **{term}**: {text}" for term, text in GLOSSARY.items())

PICK_MODEL = "Pick a model or profile above."  # after a message saying why no model is loaded
