// The board's one script. It keeps a page live without a reload: every
// second it asks /board/live for the org's change mark, and when the mark
// moves it fetches the page again and swaps in its #live part, parsed as
// inert HTML (DOMParser runs no script; the server escaped every field).
// Nothing else: no content is ever built from strings here.
(function () {
  "use strict";
  var body = document.body;
  var mark = body.dataset.mark;
  if (!mark) return;
  var POLL_MS = 1000;
  var busy = false;
  var again = false;
  var refreshes = 0;
  var status = document.getElementById("live-status");

  function refresh() {
    busy = true;
    var focused = document.activeElement;
    var live = document.getElementById("live");
    var href = focused && live && live.contains(focused) ? focused.getAttribute("href") : null;
    return fetch(location.href, { credentials: "same-origin", cache: "no-store" })
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
        if (status) status.textContent = "Updated at " + new Date().toLocaleTimeString();
      })
      .catch(function () {})
      .then(function () { busy = false; });
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

  setInterval(tick, POLL_MS);
  document.addEventListener("visibilitychange", tick);
})();
