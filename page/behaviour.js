() => {
  /* The page's behaviour beyond gradio's, run once when the page loads (`page.hardening.harden` passes it to `launch(js=...)`):
     after any way of asking, the answer is scrolled into view when it shows; a readout table too wide for its box
     (page/tables.py) is marked (data-sideways) so that the stylesheet can say it scrolls. Reads gradio 6.31's
     markup (the page's element ids, labels, roles, data-testid); writes only a table box's data-sideways mark,
     and scrolls the window. */
  const ANSWER = { top: "#answer-status", bottom: "#best-answer" };
  const COMPARISON = { top: "#compare-table", bottom: "#compare-table" };
  const ASKING = "Asking";  // how the answer area starts while an ask runs (ui_format.ASKING_STATUS)
  const GIVE_UP_MS = 15 * 60 * 1000;  // an ask that never reports back stops being watched
  let pending = null;  // the ask in flight: { area, started, askingSeen, summary }

  const text = (selector) => document.querySelector(selector)?.innerText.trim() ?? "";

  // Scrolls `area` to the top of the screen unless its top and bottom already show. While a read runs (`reading`),
  // Stop stays on the screen: where it sits above the answer (a phone's one column), the scroll stops at Stop's row.
  function show(area, reading = false) {
    const top = document.querySelector(area.top);
    if (!top) return;
    const first = top.getBoundingClientRect();
    const last = (document.querySelector(area.bottom) || top).getBoundingClientRect();
    if (first.top >= 0 && last.bottom <= window.innerHeight) return;
    const stop = reading ? stopButton() : null;
    const row = stop?.parentElement.getBoundingClientRect();
    if (row && row.top < first.top && first.top - row.top < window.innerHeight / 2) {
      if (row.top < 0 || first.top > window.innerHeight / 2) window.scrollBy({ top: row.top - 8, behavior: "instant" });
      return;
    }
    top.scrollIntoView({ block: "start", behavior: "instant" });
  }

  function stopButton() {
    return Array.from(document.querySelectorAll("#ask-row button")).find(b => b.innerText.trim() === "Stop") ?? null;
  }

  function settle(area) {  // the answer's passage and tables render after the status: look again once they have
    for (const delay of [150, 600, 1500]) setTimeout(() => show(area), delay);
  }

  function startAsk(area) {
    pending = { area, started: Date.now(), askingSeen: false, summary: text("#compare-summary") };
    if (area === COMPARISON) setTimeout(() => show(area), 100);  // its progress shows on the table
  }

  function whichAsk(target) {
    const button = target.closest("button");
    if (!button) return null;
    if (button.id === "try-example" || button.closest(".gallery")) return ANSWER;
    const label = button.innerText.trim();
    if (button.closest("#ask-row") && (label === "Ask" || label === "Read the whole document")) return ANSWER;
    if (button.closest("#compare-panel") && label === "Compare profiles") return COMPARISON;
    return null;
  }

  function isQuestionBox(target) {
    const block = target.closest("label");
    return target.matches("textarea, input") && block?.querySelector("[data-testid=block-info]")?.innerText.trim()
      === "Question";
  }

  // The question box's text; an ask with none stays where the visitor types (the note beside the box says why).
  function questionText() {
    const box = Array.from(document.querySelectorAll("#ask-row textarea, #ask-row input")).find(isQuestionBox);
    return box?.value.trim() ?? "";
  }

  document.addEventListener("click", (event) => {
    const area = whichAsk(event.target);
    const typed = event.target.closest("#ask-row") === null || questionText() !== "";  // Try it, an example: filled
    if (area && (area !== ANSWER || typed)) startAsk(area);
  }, true);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && isQuestionBox(event.target) && questionText()) startAsk(ANSWER);
  }, true);

  function followAsk() {
    if (!pending) return;
    if (Date.now() - pending.started > GIVE_UP_MS) { pending = null; return; }
    if (pending.area === COMPARISON) {
      if (text("#compare-summary") && text("#compare-summary") !== pending.summary) {
        settle(COMPARISON);
        pending = null;
      }
      return;
    }
    if (text(ANSWER.top).startsWith(ASKING)) {
      if (!pending.askingSeen) show(ANSWER, true);  // the progress shows over it, the best answer so far below
      pending.askingSeen = true;
    } else if (pending.askingSeen) {
      show(ANSWER);
      settle(ANSWER);
      pending = null;
    }
  }

  // Marks each readout table's box that scrolls sideways: "yes", or "end" once its last column shows.
  function markSideways() {
    for (const box of document.querySelectorAll(".readout-scroll")) {
      const hidden = box.scrollWidth - box.clientWidth;
      const state = hidden <= 1 ? null : box.scrollLeft >= hidden - 2 ? "end" : "yes";
      if (state === null) box.removeAttribute("data-sideways");
      else if (box.getAttribute("data-sideways") !== state) box.setAttribute("data-sideways", state);
    }
  }

  // Tables are looked at again when they change size (an accordion opened, the window turned) as well as when
  // their contents change.
  const watched = new WeakSet();
  const resized = new ResizeObserver(() => update());
  function watchTables() {
    for (const box of document.querySelectorAll(".readout-scroll")) {
      if (!watched.has(box)) { watched.add(box); resized.observe(box); }
    }
  }

  let queued = false;
  function update() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; followAsk(); watchTables(); markSideways(); });
  }
  new MutationObserver(update).observe(document.body, { childList: true, subtree: true, characterData: true });
  document.addEventListener("scroll", update, true);
  window.addEventListener("resize", update);
  update();
}
