// The board's one script. It keeps a page current without a reload or a
// poll: it follows the org's event stream (/board/events, from the newest
// event before the page was made), gathers the events of about 200 ms,
// and redraws only what they changed. On the board, the cards of the
// tasks that changed come from /board/cards, which leaves out those the
// page's filters do not keep; each moves to its column, and the counts
// follow (a first page that ends before its list does keeps the tasks
// that sort before its end, and fills up again below half a page). Other
// pages, later pages, a search, and a burst of too many tasks fetch the
// page again and swap in its #live part, at most once a second. Every piece of HTML comes from the server, which escaped
// every field, and is parsed as inert HTML (DOMParser runs no script):
// nothing is ever built from strings here.
(function () {
  "use strict";
  var body = document.body;
  if (!body.dataset.since || !document.getElementById("live") || !window.EventSource) return;
  var GATHER_MS = 200;
  var REFRESH_GAP_MS = 1000;
  var MAX_CARDS = 25;
  var RETRY_MS = 5000;
  var lastId = body.dataset.since;
  var stream = null;
  // The tasks whose cards are to be redrawn; or, on a page that is
  // fetched whole, whether it is to be.
  var changed = {};
  var stale = false;
  var timer = null;
  var busy = false;
  var lastRefresh = 0;
  var retry = RETRY_MS;
  var updates = 0;
  var status = document.getElementById("live-status");

  function live() { return document.getElementById("live"); }

  function done() {
    updates += 1;
    body.dataset.refreshes = String(updates);
    if (status) status.textContent = "Updated at " + new Date().toLocaleTimeString();
  }

  function parse(text) {
    return new DOMParser().parseFromString(text, "text/html");
  }

  function get(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      // A session that ended sends every board request to the sign-in form.
      if (r.status === 401 || (r.redirected && new URL(r.url).pathname === "/board")) {
        location.assign("/board");
        throw new Error("signed out");
      }
      if (!r.ok) throw new Error("status " + r.status);
      return r.text();
    });
  }

  // The page again, its #live part swapped in; the focus stays on its link.
  function refresh() {
    lastRefresh = Date.now();
    var focused = document.activeElement;
    var href = focused && live() && live().contains(focused) ? focused.getAttribute("href") : null;
    return get(location.href).then(function (text) {
      var fresh = parse(text).getElementById("live");
      var current = live();
      if (!fresh || !current) return;
      current.replaceWith(document.importNode(fresh, true));
      if (href) {
        var again = document.querySelector('#live [href="' + CSS.escape(href) + '"]');
        if (again) again.focus();
      }
      done();
    });
  }

  function column(status) {
    return live().querySelector('.col[data-status="' + CSS.escape(status) + '"]');
  }

  function recount() {
    var shown = 0;
    live().querySelectorAll(".col").forEach(function (col) {
      var n = col.querySelectorAll(".card").length;
      shown += n;
      col.querySelector(".count").textContent = String(n);
      col.querySelector(".empty").hidden = n > 0;
    });
    var total = document.getElementById("shown");
    if (total) total.textContent = String(shown);
  }

  // A card goes before the first card of a lower priority in its column.
  function place(card, status) {
    var col = column(status);
    if (!col) return;
    var list = col.querySelector("ul");
    var priority = Number(card.dataset.priority);
    var next = null;
    list.querySelectorAll(".card").forEach(function (other) {
      if (!next && other !== card && Number(other.dataset.priority) > priority) next = other;
    });
    list.insertBefore(card, next);
  }

  function redraw(ids) {
    var root = live();
    var query = (root.dataset.filters || "") + "task_id=" + ids.map(encodeURIComponent).join(",");
    return get("/board/cards?" + query).then(function (text) {
      var fresh = parse(text).getElementById("cards");
      if (!fresh) return;
      ids.forEach(function (id) {
        var old = root.querySelector('.card[data-task="' + CSS.escape(id) + '"]');
        var card = fresh.querySelector('.card[data-task="' + CSS.escape(id) + '"]');
        if (old) old.remove();
        if (card) place(document.importNode(card, true), card.dataset.status);
      });
      recount();
      done();
      // A first page that ends before its list does, emptied below its
      // least, is fetched again to fill up.
      var min = Number(root.dataset.min || 0);
      if (root.querySelectorAll(".card").length < min) { stale = true; schedule(); }
    });
  }

  // Whether an event of task `id` changes what this page shows.
  function concerns(id, to, from) {
    var root = live();
    if (root.dataset.task) {
      // A task page: its task, the tasks on its graph, or a new task that
      // may be blocked by it.
      return root.dataset.task === id || !!root.querySelector('[data-task="' + CSS.escape(id) + '"]') ||
        (!from && to === "blocked");
    }
    return true;
  }

  function flush() {
    timer = null;
    if (busy || document.hidden) return;
    var ids = Object.keys(changed);
    if (ids.length === 0 && !stale) return;
    var whole = stale || live().dataset.live !== "cards" || ids.length > MAX_CARDS;
    var wait = lastRefresh + REFRESH_GAP_MS - Date.now();
    if (whole && wait > 0) {
      timer = setTimeout(flush, wait);
      return;
    }
    changed = {};
    stale = false;
    busy = true;
    (whole ? refresh() : redraw(ids)).catch(function () {}).then(function () {
      busy = false;
      if (Object.keys(changed).length > 0 || stale) schedule();
    });
  }

  function schedule() {
    if (!timer) timer = setTimeout(flush, GATHER_MS);
  }

  function onEvent(e) {
    if (e.lastEventId) lastId = e.lastEventId;
    var data;
    try { data = JSON.parse(e.data).data; } catch (_) { return; }
    if (!data || !data.task_id || !concerns(data.task_id, data.to_status, data.from_status)) return;
    if (live().dataset.live === "cards") changed[data.task_id] = true;
    else stale = true;
    schedule();
  }

  function open() {
    if (stream) return;
    stream = new EventSource("/board/events?since=" + encodeURIComponent(lastId));
    ["task.created", "task.claimed", "task.completed", "task.failed", "task.canceled",
      "task.lease_expired", "task.unblocked", "message"].forEach(function (name) {
      stream.addEventListener(name, onEvent);
    });
    stream.onopen = function () { retry = RETRY_MS; };
    stream.onerror = function () {
      // EventSource reconnects by itself (sending Last-Event-ID) after a
      // dropped connection; a refused one (no session, too many streams,
      // the org moving) it gives up: look at the page, then try again.
      if (!stream || stream.readyState !== EventSource.CLOSED) return;
      stream = null;
      refresh().catch(function () {});
      setTimeout(function () { if (!document.hidden) open(); }, retry);
      retry = Math.min(retry * 2, 60000);
    };
  }

  function close() {
    if (stream) stream.close();
    stream = null;
  }

  // A hidden tab holds no stream; shown again, it goes on from the last
  // event it saw.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); return; }
    open();
    schedule();
  });
  if (!document.hidden) open();
})();
