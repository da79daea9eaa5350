"""`python -m bench page-wait`'s own logic without a browser: the readout read back from the page's JSON panel as it
shows it, and the table's arithmetic (the measurement itself drives chromium against `python app.py`)."""

from bench import page_wait

SHOWN = ('Full readout (JSON)\n{\n"question"\n:\n"What is it?"\n,\n"answers"\n:\n[\n{\n"text"\n:\n"teal"\n,\n'
         '"location"\n:\n{Object(8)}\n}\n]\n,\n"latency_s"\n:\n{\n"total"\n:\n1.25\n,\n"extract"\n:\n0.5\n}\n,\n'
         '"reading"\n:\n{\n"read"\n:\n[Array(3)]\n,\n"windows_read"\n:\n3\n}\n}')


def test_the_readout_is_read_back_as_the_panel_shows_it_folded_parts_empty():
    readout = page_wait.readout_from_text(SHOWN)
    assert readout["latency_s"]["total"] == 1.25 and readout["answers"][0]["text"] == "teal"
    assert readout["answers"][0]["location"] == {} and readout["reading"] == {"read": [], "windows_read": 3}


def test_the_table_says_what_the_page_adds_to_the_engine_s_time_by_the_median():
    rows = [{"round": i, "first_s": first, "final_s": final, "engine_s": engine, "page_adds_s": final - engine}
            for i, (first, final, engine) in enumerate([(1.0, 3.0, 2.0), (None, 2.5, 2.0), (0.5, 9.0, 4.0)])]
    result = {"model": "arch:large", "profile": "cpu", "pages": 100, "rows": rows, "width": 1400,
              "command": "python -m bench page-wait", "load_average_end": [1.0, 1.0, 1.0],
              "machine": {"cpu_model": "A CPU"}, "kind": "avx2"}
    table = page_wait.markdown(result)
    assert "A CPU (kind avx2;" in table and "| 2 | — | 2.50 s | 2.00 s | +0.50 s |" in table
    assert "the visitor waits 3.00 s, the engine works 2.00 s: the page adds +1.00 s" in table
