// Refreshes the page's counts and states: every few seconds it reads the
// page's live URL, a JSON object of keys and texts, and sets the text of
// each element whose data-live attribute names a key. Nothing else
// changes, so that a form being filled in is left alone.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var url = main && main.dataset.liveUrl;
  if (!url) {
    return;
  }
  var every = 3000;
  function refresh() {
    if (document.hidden) {
      return;
    }
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        return r.ok ? r.json() : null;
      })
      .then(function (live) {
        if (!live) {
          return;
        }
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var v = live[el.dataset.live];
          if (typeof v === "string" && el.textContent !== v) {
            el.textContent = v;
            el.dataset.value = v;
          }
        });
        main.dataset.refreshed = String(Number(main.dataset.refreshed || 0) + 1);
      })
      .catch(function () {});
  }
  setInterval(refresh, every);
})();
