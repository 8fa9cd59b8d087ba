// Shared by report.html and run_report.html, inlined inside each page's closure: it uses
// that closure's NS, tip and data.
  function el(name, attrs, parent, text) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function hover(node, text) {
    el("title", {}, node, text);
    node.addEventListener("mousemove", function (e) {
      tip.textContent = text; tip.style.display = "block";
      tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
    });
    node.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }
  function seconds(ms) {
    var s = ms / 1000;
    if (Math.abs(s) < 1) { return (ms).toFixed(0) + " ms"; }
    if (Math.abs(s) < 120) { return s.toFixed(s < 10 ? 2 : 1) + " s"; }
    if (Math.abs(s) < 7200) { return (s / 60).toFixed(1) + " min"; }
    return (s / 3600).toFixed(2) + " h";
  }
  function niceTicks(lo, hi, count) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= count) { step *= m; return true; } return false; });
    var ticks = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) { ticks.push(v); }
    return ticks;
  }

  var width = Math.max(760, Math.min(1400, document.getElementById("timeline-box").clientWidth || 1100));
  var left = 150, right = 24, plot = width - left - right;
  var t0 = data.t0, t1 = Math.max(data.t1, data.t0 + 1);
  function x(t) { return left + (t - t0) / (t1 - t0) * plot; }
