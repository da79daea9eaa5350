() => {
  /* The page's behaviour beyond gradio's, run once when the page loads (`page.hardening.harden` passes it to `launch(js=...)`):
     after any way of asking, the answer is scrolled into view when it shows; a table's columns are widened to
     hold their longest words, and a table too wide for its box is marked (data-sideways) so that the stylesheet
     can say it scrolls. Reads gradio 6.31's markup (the page's element ids, labels, roles, data-testid); writes
     only a table's minimum width and its data-sideways mark, and scrolls the window. */
  const ANSWER = { top: "#answer-status", bottom: "#best-answer" };
  const COMPARISON = { top: "#compare-table", bottom: "#compare-table" };
  const ASKING = "Asking";  // how the answer area starts while an ask runs (ui_format.ASKING_STATUS)
  const GIVE_UP_MS = 15 * 60 * 1000;  // an ask that never reports back stops being watched
  let pending = null;  // the ask in flight: { area, started, askingSeen, summary }

  const text = (selector) => document.querySelector(selector)?.innerText.trim() ?? "";

  // Scrolls `area` to the top of the screen unless its top and bottom already show.
  function show(area) {
    const top = document.querySelector(area.top);
    if (!top) return;
    const first = top.getBoundingClientRect();
    const last = (document.querySelector(area.bottom) || top).getBoundingClientRect();
    if (first.top >= 0 && last.bottom <= window.innerHeight) return;
    top.scrollIntoView({ block: "start", behavior: "instant" });
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

  document.addEventListener("click", (event) => {
    const area = whichAsk(event.target);
    if (area) startAsk(area);
  }, true);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && isQuestionBox(event.target)) startAsk(ANSWER);
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
      if (!pending.askingSeen) show(ANSWER);  // the progress shows over it, the best answer so far below
      pending.askingSeen = true;
    } else if (pending.askingSeen) {
      show(ANSWER);
      settle(ANSWER);
      pending = null;
    }
  }

  // The element of a table that scrolls sideways: gradio's box around it, or, for columns set in pixels, the
  // viewport inside.
  const scroller = (table) => [table, table.querySelector(".virtual-table-viewport")]
    .find((element) => element && element.scrollWidth > element.clientWidth + 1);

  // Marks each table that scrolls sideways: "yes", or "end" once its last column shows.
  function markSideways() {
    for (const table of document.querySelectorAll(".table-wrap")) {
      const element = scroller(table);
      const hidden = element ? element.scrollWidth - element.clientWidth : 0;
      const state = !element ? null : element.scrollLeft >= hidden - 2 ? "end" : "yes";
      if (state === null) table.removeAttribute("data-sideways");
      else if (table.getAttribute("data-sideways") !== state) table.setAttribute("data-sideways", state);
    }
  }

  // Widens each table whose columns share its width (gradio's percentages) until every column holds its longest
  // word, so that no word is split across lines: a table wider than its box then scrolls sideways (and says so).
  function longestWord(text) {  // in pixels, as laid out: a word split over lines counts all its pieces
    let longest = 0;
    const walker = document.createTreeWalker(text, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.data.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        longest = Math.max(longest, Array.from(range.getClientRects()).reduce((sum, box) => sum + box.width, 0));
      }
    }
    return longest;
  }
  const across = (style, part) => parseFloat(style[`${part}Left`]) + parseFloat(style[`${part}Right`]);
  function roomFor(cell, text) {  // the width a cell's text may fill: the cell's, less paddings and the menu button
    const wrap = cell.querySelector(".cell-wrap") || cell, own = getComputedStyle(text);
    const menu = cell.querySelector(".cell-menu-button");
    const beside = menu && getComputedStyle(menu).position !== "absolute" ? menu.getBoundingClientRect().width : 0;
    return wrap.clientWidth - across(getComputedStyle(wrap), "padding") - across(own, "padding")
      - across(own, "margin") - beside;
  }
  function fitColumns() {
    for (const table of document.querySelectorAll(".table-wrap")) {
      const box = table.querySelector(".upload-container"), header = table.querySelector("table.header-table");
      if (!table.offsetParent || !box || !header) continue;
      const width = header.getBoundingClientRect().width;
      const shared = Math.abs(width - box.getBoundingClientRect().width) <= 2;  // widths in percent, not pixels
      if (!shared || width === 0) continue;
      let needed = 0;
      for (const cell of table.querySelectorAll("th, [role=gridcell]")) {
        const text = cell.querySelector("span.text") || cell;
        const column = cell.getBoundingClientRect().width;
        const room = roomFor(cell, text);
        if (!column || !room) continue;
        const word = longestWord(text) + 2;
        needed = Math.max(needed, (word + column - room) * width / column);  // for every cell: a fixed point
      }
      // The share of each column is fixed, so what is needed does not depend on the width now: set it afresh
      // (a narrower answer lets the table narrow again).
      const minWidth = needed > table.clientWidth + 1 ? `${Math.ceil(needed)}px` : "";
      if (box.style.minWidth !== minWidth) box.style.minWidth = minWidth;
    }
  }

  // Tables are laid out again when they change size (an accordion opened, the window turned) as well as when
  // their contents change.
  const watched = new WeakSet();
  const resized = new ResizeObserver(() => update());
  function watchTables() {
    for (const table of document.querySelectorAll(".table-wrap")) {
      if (!watched.has(table)) { watched.add(table); resized.observe(table); }
    }
  }

  let queued = false;
  function update() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; followAsk(); watchTables(); fitColumns(); markSideways(); });
  }
  new MutationObserver(update).observe(document.body, { childList: true, subtree: true, characterData: true });
  document.addEventListener("scroll", update, true);
  window.addEventListener("resize", update);
  update();
}
