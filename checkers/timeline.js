// durasim timeline page: draws the marks of one page as SVG lanes and table rows.
// Every string from the timeline is set with textContent, never parsed as markup.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("timeline-data").textContent);
  var lanes = data.lanes, marks = data.marks, spans = data.spans, PAGE = data.page;
  var AT = 0, LANE = 1, KIND = 2, LABEL = 3, DETAIL = 4, SEQ = 5, STATUS = 6, FAILURE = 7;
  var SVG = "http://www.w3.org/2000/svg"; // a namespace name, never fetched
  var page = 0, shown = allIndices();
  var rows = document.getElementById("rows"), chart = document.getElementById("chart");
  var pageLabel = document.getElementById("page-label");

  function allIndices() { var out = []; for (var i = 0; i < marks.length; i++) out.push(i); return out; }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var key in attrs) node.setAttribute(key, String(attrs[key]));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function fmt(seconds) {
    if (seconds === 0) return "+0s";
    if (seconds < 1) return "+" + (seconds * 1000).toPrecision(3) + "ms";
    if (seconds < 120) return "+" + seconds.toPrecision(4) + "s";
    var d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
    var m = Math.floor(seconds % 3600 / 60), s = Math.round(seconds % 60);
    return "+" + (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + s + "s";
  }

  function pages() { return Math.max(1, Math.ceil(shown.length / PAGE)); }

  function render() {
    page = Math.min(Math.max(page, 0), pages() - 1);
    var ids = shown.slice(page * PAGE, (page + 1) * PAGE);
    pageLabel.textContent = shown.length
      ? "marks " + (page * PAGE + 1) + "\u2013" + (page * PAGE + ids.length) + " of " + shown.length +
        " (page " + (page + 1) + " of " + pages() + ")"
      : "no mark matches";
    document.getElementById("prev").disabled = page === 0;
    document.getElementById("next").disabled = page >= pages() - 1;
    drawRows(ids);
    drawChart(ids);
  }

  function drawRows(ids) {
    var fragment = document.createDocumentFragment();
    ids.forEach(function (i) {
      var m = marks[i];
      var tr = el("tr", "mark-row" + (m[FAILURE] ? " failure" : ""));
      tr.id = "mark-" + i;
      tr.setAttribute("data-kind", m[KIND]);
      tr.appendChild(el("td", "num", (i + 1) + (m[SEQ] ? " #" + m[SEQ] : "")));
      tr.appendChild(el("td", "time", fmt(m[AT])));
      tr.appendChild(el("td", "lane", lanes[m[LANE]][0]));
      tr.appendChild(el("td", "what " + m[STATUS], m[LABEL]));
      var cell = el("td", "detail");
      var text = m[DETAIL] || "";
      var cut = text.indexOf("\n");
      if (cut < 0) {
        cell.appendChild(el("span", "", text));
      } else {
        var details = el("details");
        details.appendChild(el("summary", "", text.slice(0, cut)));
        details.appendChild(el("pre", "", text.slice(cut + 1)));
        if (m[FAILURE]) details.open = true;
        cell.appendChild(details);
      }
      tr.appendChild(cell);
      fragment.appendChild(tr);
    });
    rows.replaceChildren(fragment);
  }

  function drawChart(ids) {
    chart.replaceChildren();
    if (!ids.length) return;
    var first = ids[0], last = ids[ids.length - 1], filtered = shown.length !== marks.length;
    var used = [], row = {};
    function use(lane) { if (!(lane in row)) { row[lane] = used.length; used.push(lane); } }
    var pageSpans = filtered ? [] : spans.filter(function (s) { return s[2] >= first && s[1] <= last; });
    lanes.forEach(function (_, lane) {
      var here = pageSpans.some(function (s) { return s[0] === lane; }) ||
        ids.some(function (i) { return marks[i][LANE] === lane; });
      if (here) use(lane);
    });
    var labelWidth = 12 + 7 * Math.min(40, Math.max.apply(null, used.map(function (l) { return lanes[l][0].length; })));
    var step = Math.max(8, Math.min(28, 1100 / ids.length)), top = 34, height = 22;
    var width = labelWidth + step * ids.length + 90, total = top + height * used.length + 8;
    var root = svg("svg", { width: width, height: total, role: "img", "aria-label": "timeline" });
    var column = {};
    ids.forEach(function (i, k) { column[i] = k; });
    function x(k) { return labelWidth + step * k + step / 2; }
    used.forEach(function (lane, r) {
      var y = top + r * height;
      if (r % 2 === 0) root.appendChild(svg("rect", { x: 0, y: y, width: width, height: height, "class": "lane-bg" }));
      var label = lanes[lane][0];
      if (label.length > 40) label = label.slice(0, 39) + "\u2026";
      var text = svg("text", { x: 6, y: y + 15, "class": "lane-label" }, label);
      text.appendChild(svg("title", {}, lanes[lane][0]));
      root.appendChild(text);
    });
    pageSpans.forEach(function (s) {
      var a = Math.max(s[1], first) - first, b = Math.min(s[2], last) - first;
      var y = top + row[s[0]] * height + 5;
      var bar = svg("rect", { x: x(a) - step / 2 + 1, y: y, width: Math.max(step * (b - a + 1) - 2, 3),
        height: height - 10, rx: 3, "class": "span " + s[3] });
      bar.appendChild(svg("title", {}, lanes[s[0]][0] + ": " + s[3]));
      root.appendChild(bar);
    });
    var lastTick = -1e9, lastTime = null;
    ids.forEach(function (i, k) {
      var m = marks[i], cx = x(k), cy = top + row[m[LANE]] * height + height / 2;
      var label = fmt(m[AT]);
      if (label !== lastTime && cx - lastTick > 80) {
        root.appendChild(svg("line", { x1: cx, x2: cx, y1: top - 6, y2: top, stroke: "#9ca3af" }));
        root.appendChild(svg("text", { x: cx + 2, y: top - 10, "class": "tick" }, label));
        lastTick = cx; lastTime = label;
      }
      if (m[FAILURE]) {
        root.appendChild(svg("line", { x1: cx, x2: cx, y1: top, y2: total - 4, "class": "failure-line" }));
      }
      var kind = m[LANE] === 0 && m[KIND] !== "event" && m[KIND] !== "call" ? "sim" : m[KIND];
      var shape = m[KIND] === "call" || m[KIND] === "reject"
        ? svg("rect", { x: cx - 4, y: cy - 4, width: 8, height: 8 })
        : svg("circle", { cx: cx, cy: cy, r: 5 });
      shape.setAttribute("class", "mark " + kind + " " + (m[STATUS] || "none"));
      shape.setAttribute("data-mark", i);
      shape.appendChild(svg("title", {}, (i + 1) + " " + fmt(m[AT]) + " " + m[LABEL] + "\n" + (m[DETAIL] || "").slice(0, 600)));
      shape.addEventListener("click", function () { focus(i); });
      root.appendChild(shape);
      if (m[FAILURE]) {
        var ring = svg("circle", { cx: cx, cy: cy, r: 9, "class": "failure-ring" });
        ring.setAttribute("data-mark", i);
        root.appendChild(ring);
      }
    });
    chart.appendChild(root);
  }

  function focus(i) {
    if (shown.indexOf(i) < 0) { shown = allIndices(); document.getElementById("filter").value = ""; }
    page = Math.floor(shown.indexOf(i) / PAGE);
    render();
    var tr = document.getElementById("mark-" + i);
    if (tr) {
      tr.classList.add("focus");
      var details = tr.querySelector("details");
      if (details) details.open = true;
      tr.scrollIntoView({ block: "center" });
    }
  }

  document.getElementById("prev").addEventListener("click", function () { page -= 1; render(); });
  document.getElementById("next").addEventListener("click", function () { page += 1; render(); });
  document.getElementById("filter").addEventListener("input", function (event) {
    var words = event.target.value.toLowerCase().split(/\s+/).filter(Boolean);
    shown = allIndices().filter(function (i) {
      var m = marks[i];
      var text = (lanes[m[LANE]][0] + " " + m[KIND] + " " + m[LABEL] + " " + m[STATUS] + " " + m[DETAIL]).toLowerCase();
      return words.every(function (w) { return text.indexOf(w) >= 0; });
    });
    page = 0;
    render();
  });
  Array.prototype.forEach.call(document.querySelectorAll(".goto-failure"), function (button) {
    button.addEventListener("click", function () { focus(Number(button.getAttribute("data-mark"))); });
  });
  var failures = marks.map(function (m, i) { return m[FAILURE] ? i : -1; }).filter(function (i) { return i >= 0; });
  if (failures.length) page = Math.floor(failures[0] / PAGE);
  render();
  document.body.setAttribute("data-rendered", String(marks.length));
})();
