// Start plotly.js while the server builds the page, not after: the browser is idle then.
// dcc.Graph loads plotly.js itself unless window.Plotly is set; a promise there makes it wait
// for this load instead of starting a second one. The bundle sets window.Plotly when it runs.
(function () {
  "use strict";
  var URL = "/_dash-component-suites/plotly/package_data/plotly.min.js";
  var started = false;
  function start() {
    if (started || window.Plotly) return;
    started = true;
    window.Plotly = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = URL;
      s.async = true;
      s.onload = function () { resolve(window.Plotly); };
      s.onerror = function () { reject(new Error("plotly.js did not load")); };
      document.head.appendChild(s);
    });
  }
  // The first callback request is the page's layout: the server is busy from then on.
  var fetch0 = window.fetch;
  window.fetch = function (input) {
    if (!started && String((input && input.url) || input).indexOf("_dash-update-component") >= 0) {
      start();
    }
    return fetch0.apply(this, arguments);
  };
})();
