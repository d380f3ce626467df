// The board's one script. It keeps a page live without a reload, on the
// board's stream (an EventSource on /board/live): each `changed` event
// carries the org's open tasks per status, shown in the columns' totals
// at once, and the ids of the tasks that changed. When every one of them
// is a card on this page, only those cards are fetched (/board/cards, with
// the page's filters) and put in their columns; otherwise the page fetches
// itself again, once every REFETCH_MS at most over time: a page quiet for
// a while may fetch itself REFETCH_BURST times in a row (a claim and its
// completion soon after are both shown at once), each after a random
// delay of up to JITTER_MS, naming the last notice so that the server may
// share one read among the org's boards. Without the stream (it failed,
// or the browser has none) the page polls /board/live for the org's
// change mark every POLL_MS, as before. Fetched markup is parsed as inert
// HTML (DOMParser runs no script; the server escaped every field);
// nothing is ever built from strings here.
//
// Times: every <time> arrives with its exact instant in `datetime` and
// `title` and, as its text, the UTC wall-clock time (or, with `data-zone`,
// the time in that zone, which is kept). Here each is written in the
// reader's own zone with how far off it is ("in 3 h", "5 min ago"), again
// for every <time> a fetch puts on the page, and the distances are kept
// current each half minute.
(function () {
  "use strict";
  var local = window.Intl && Intl.DateTimeFormat ? new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", timeZoneName: "short"
  }) : null;

  function distance(ms) {
    var s = Math.abs(ms) / 1000;
    var text;
    if (s < 45) return "now";
    if (s < 45 * 60) text = Math.max(1, Math.round(s / 60)) + " min";
    else if (s < 22 * 3600) text = Math.round(s / 3600) + " h";
    else text = Math.round(s / 86400) + " d";
    return ms > 0 ? "in " + text : text + " ago";
  }

  function show() {
    var times = document.querySelectorAll("time[datetime]");
    var now = Date.now();
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var at = Date.parse(t.getAttribute("datetime"));
      if (isNaN(at)) continue;
      if (!t.dataset.text) {
        t.dataset.text = t.dataset.zone || !local ? t.textContent : local.format(at);
      }
      var text = t.dataset.text + " (" + distance(at - now) + ")";
      if (t.textContent !== text) t.textContent = text;
    }
  }

  show();
  setInterval(show, 30000);
  if (window.MutationObserver) {
    new MutationObserver(show).observe(document.body, { childList: true, subtree: true });
  }
})();

(function () {
  "use strict";
  var body = document.body;
  var mark = body.dataset.mark;
  if (!mark) return;
  var POLL_MS = 1000;
  var REFETCH_MS = 5000;
  var REFETCH_BURST = 2;
  var JITTER_MS = 1000;
  var busy = false;
  var again = false;
  var refreshes = 0;
  var cardFetches = 0;
  // Fetches of the page allowed now, and when they were last counted.
  var allowance = REFETCH_BURST;
  var counted = Date.now();
  var refetchTimer = null;
  var missed = false;
  var status = document.getElementById("live-status");
  var searching = !!new URLSearchParams(location.search).get("q");

  function updated() {
    if (status) status.textContent = "Updated at " + new Date().toLocaleTimeString();
  }

  // The page fetched again. On the stream it names the last notice heard
  // (X-Board-Mark): the server may then make it from a list another board
  // of the org read since that notice.
  function refresh(onStream) {
    busy = true;
    var focused = document.activeElement;
    var live = document.getElementById("live");
    var href = focused && live && live.contains(focused) ? focused.getAttribute("href") : null;
    var headers = onStream ? { "X-Board-Mark": mark } : {};
    return fetch(location.href, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (r) {
        if (!r.ok) throw new Error("status " + r.status);
        return r.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
        var current = document.getElementById("live");
        if (!fresh || !current) return;
        current.replaceWith(document.importNode(fresh, true));
        if (href) {
          var again = document.querySelector('#live [href="' + CSS.escape(href) + '"]');
          if (again) again.focus();
        }
        refreshes += 1;
        body.dataset.refreshes = String(refreshes);
        updated();
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }

  // Fetches allowed now, counted up to this moment.
  function allowed() {
    var now = Date.now();
    allowance = Math.min(REFETCH_BURST, allowance + (now - counted) / REFETCH_MS);
    counted = now;
    return allowance;
  }

  // The page fetched again as soon as the allowance has one, after a
  // random part of JITTER_MS: every open board hears a notice at the same
  // moment, and without it they would all fetch their pages together.
  function refetchSoon() {
    if (refetchTimer !== null) return;
    var wait = Math.max(0, (1 - allowed()) * REFETCH_MS) + Math.random() * JITTER_MS;
    refetchTimer = setTimeout(function () {
      refetchTimer = null;
      if (busy || allowed() < 1) {
        refetchSoon();
        return;
      }
      allowance -= 1;
      refresh(true);
    }, wait);
  }

  function cardOf(id) {
    return document.querySelector('#live .columns .card[data-task="' + CSS.escape(id) + '"]');
  }

  // Each column's count of the cards it shows.
  function recount() {
    var cols = document.querySelectorAll("#live .col");
    for (var i = 0; i < cols.length; i++) {
      var count = cols[i].querySelector(".count");
      if (count) count.textContent = String(cols[i].querySelectorAll(".card").length);
    }
    showTotals();
  }

  // A column's total ("3 shown of 40") is shown while its cards are fewer.
  function showTotals() {
    var cols = document.querySelectorAll("#live .col");
    for (var i = 0; i < cols.length; i++) {
      var count = cols[i].querySelector(".count");
      var total = cols[i].querySelector(".total");
      var n = cols[i].querySelector("[data-count]");
      if (count && total && n) total.hidden = count.textContent === n.textContent;
    }
  }

  function showCounts(counts) {
    var shown = document.querySelectorAll("#live [data-count]");
    for (var i = 0; i < shown.length; i++) {
      var n = counts[shown[i].dataset.count];
      if (typeof n === "number") shown[i].textContent = String(n);
    }
    showTotals();
  }

  // The changed cards, fetched with the page's filters: each put in its
  // status's column, and those no longer kept removed.
  function fetchCards(ids) {
    busy = true;
    var query = new URLSearchParams(location.search);
    query.set("ids", ids.join(","));
    return fetch("/board/cards?" + query.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("status " + r.status);
        return r.text();
      })
      .then(function (text) {
        var list = new DOMParser().parseFromString(text, "text/html").getElementById("cards");
        if (!list) throw new Error("no cards");
        var fresh = {};
        var items = list.querySelectorAll("li.card");
        for (var i = 0; i < items.length; i++) fresh[items[i].dataset.task] = items[i];
        ids.forEach(function (id) {
          var old = cardOf(id);
          var item = fresh[id];
          var col = item && document.querySelector(
            '#live .col[data-status="' + CSS.escape(item.dataset.status) + '"]');
          var focused = old && old.contains(document.activeElement);
          if (!item || !col) {
            if (old) old.remove();
            return;
          }
          var card = document.importNode(item, true);
          var ul = col.querySelector("ul");
          if (old && old.parentNode === ul) old.replaceWith(card);
          else {
            if (old) old.remove();
            var empty = col.querySelector(".empty");
            if (empty) empty.remove();
            ul.appendChild(card);
          }
          if (focused) card.querySelector("a").focus();
        });
        recount();
        cardFetches += 1;
        body.dataset.cardFetches = String(cardFetches);
        updated();
      })
      .then(function () { busy = false; }, function () {
        busy = false;
        refetchSoon();
      });
  }

  function changed(notice) {
    mark = notice.mark;
    showCounts(notice.counts || {});
    var ids = notice.tasks || [];
    if (!notice.more && ids.length === 0) return;
    if (document.hidden) {
      missed = true;
      return;
    }
    var onPage = !notice.more && !searching && !busy && ids.length > 0 &&
      ids.every(function (id) { return cardOf(id) !== null; });
    if (onPage) fetchCards(ids);
    else refetchSoon();
  }

  function tick() {
    if (document.hidden || busy) return;
    fetch("/board/live", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) {
          location.assign("/board");
          return null;
        }
        return r.ok ? r.json() : null;
      })
      .then(function (v) {
        if (!v) return;
        if (v.mark !== mark) {
          mark = v.mark;
          // A change's rows may commit just after its mark moves: look
          // once more on the next tick.
          again = true;
          return refresh();
        }
        if (again) {
          again = false;
          return refresh();
        }
      })
      .catch(function () {});
  }

  function poll() {
    body.dataset.live = "poll";
    setInterval(tick, POLL_MS);
    document.addEventListener("visibilitychange", tick);
  }

  if (!window.EventSource) {
    poll();
    return;
  }
  var source = new EventSource("/board/live?mark=" + encodeURIComponent(mark));
  source.addEventListener("open", function () { body.dataset.live = "stream"; });
  source.addEventListener("changed", function (e) {
    var notice;
    try {
      notice = JSON.parse(e.data);
    } catch (err) {
      return;
    }
    changed(notice);
  });
  // A stream that ended is opened again by the browser; one refused (a
  // session gone: 401) is closed, and the poll then finds out why.
  source.addEventListener("error", function () {
    if (source.readyState === EventSource.CLOSED) poll();
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && missed) {
      missed = false;
      refetchSoon();
    }
  });
})();
