(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('kvreplay-data').textContent);
  var W = 720, H = 260, L = 64, R = 16, T = 12, B = 38;

  function num(v, percent) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    if (percent) return (v * 100).toFixed(Math.abs(v) < 0.1 ? 2 : 1) + '%';
    var a = Math.abs(v);
    function short(d, unit) { return String(parseFloat((v / d).toFixed(a >= 10 * d ? 0 : 1))) + unit; }
    if (a >= 1e9) return short(1e9, 'G');
    if (a >= 1e6) return short(1e6, 'M');
    if (a >= 1e4) return short(1e3, 'k');
    if (a === Math.round(a)) return String(v);
    return String(parseFloat(v.toPrecision(3)));
  }
  function niceTicks(lo, hi, count, integer) {
    if (!(hi > lo)) { hi = lo + 1; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / count)));
    var err = (hi - lo) / count / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    if (integer) step = Math.max(1, Math.round(step));
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }

  // spec: {title, xLabel, yLabel, percent, integer (y), integerX, x: [..], markers,
  //        series: [{name, color, lo: [..], hi: [..], x: [..] (optional)}],
  //        hlines: [{y, label, color}], vlines: [{x, label, color}]}
  function drawChart(holder, spec) {
    var xs = [], ys = [];
    spec.series.forEach(function (s) {
      var sx = s.x || spec.x;
      sx.forEach(function (v, i) {
        if (s.hi[i] === null) return;
        xs.push(v); ys.push(s.hi[i]); ys.push(s.lo[i]);
      });
    });
    (spec.hlines || []).forEach(function (h) { ys.push(h.y); });
    (spec.vlines || []).forEach(function (v) { xs.push(v.x); });
    var x0 = Math.min.apply(null, xs.concat([Infinity])), x1 = Math.max.apply(null, xs.concat([-Infinity]));
    if (!isFinite(x0)) { x0 = 0; x1 = 1; }
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    var y0 = Math.min(0, Math.min.apply(null, ys.concat([0])));
    var y1 = Math.max.apply(null, ys.concat([0]));
    if (!(y1 > y0)) y1 = y0 + (spec.percent ? 0.01 : 1);
    var yt = niceTicks(y0, y1, 5, !spec.percent && spec.integer);
    y1 = Math.max(y1, yt[yt.length - 1]);
    var xt = niceTicks(x0, x1, 6, spec.integerX);
    function px(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function py(v) { return T + (1 - (v - y0) / (y1 - y0)) * (H - T - B); }
    var svg = ['<svg viewBox="0 0 ' + W + ' ' + H + '" role="img" aria-label="' + esc(spec.title) + '">'];
    yt.forEach(function (v) {
      var y = py(v).toFixed(1);
      svg.push('<line class="grid" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>');
      svg.push('<text x="' + (L - 6) + '" y="' + y + '" dy="4" text-anchor="end">' + num(v, spec.percent) + '</text>');
    });
    xt.forEach(function (v) {
      if (v < x0 || v > x1) return;
      var x = px(v).toFixed(1);
      svg.push('<line class="axis" x1="' + x + '" x2="' + x + '" y1="' + (H - B) + '" y2="' + (H - B + 4) + '"/>');
      svg.push('<text x="' + x + '" y="' + (H - B + 16) + '" text-anchor="middle">' + num(v) + '</text>');
    });
    svg.push('<line class="axis" x1="' + L + '" x2="' + (W - R) + '" y1="' + (H - B) + '" y2="' + (H - B) + '"/>');
    svg.push('<line class="axis" x1="' + L + '" x2="' + L + '" y1="' + T + '" y2="' + (H - B) + '"/>');
    svg.push('<text x="' + ((L + W - R) / 2) + '" y="' + (H - 4) + '" text-anchor="middle">' + esc(spec.xLabel) + '</text>');
    svg.push('<text transform="translate(12 ' + ((T + H - B) / 2) + ') rotate(-90)" text-anchor="middle">' + esc(spec.yLabel) + '</text>');
    (spec.hlines || []).forEach(function (h) {
      var y = py(h.y).toFixed(1);
      svg.push('<line class="ref" stroke="' + h.color + '" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>');
      var below = py(h.y) < T + 14;  // a line at the top gets its label underneath
      svg.push('<text x="' + (W - R - 4) + '" y="' + y + '" dy="' + (below ? 12 : -4) + '" text-anchor="end">' + esc(h.label) + '</text>');
    });
    (spec.vlines || []).forEach(function (v) {
      var x = px(v.x).toFixed(1);
      svg.push('<line class="ref" stroke="' + v.color + '" x1="' + x + '" x2="' + x + '" y1="' + T + '" y2="' + (H - B) + '"/>');
    });
    var paths = 0;
    spec.series.forEach(function (s) {
      var sx = s.x || spec.x, top = [], bottom = [], band = false;
      sx.forEach(function (v, i) {
        if (s.hi[i] === null) return;
        top.push(px(v).toFixed(1) + ',' + py(s.hi[i]).toFixed(1));
        bottom.push(px(v).toFixed(1) + ',' + py(s.lo[i]).toFixed(1));
        if (s.lo[i] !== s.hi[i]) band = true;
      });
      if (top.length === 0) return;
      if (band) {
        svg.push('<path class="band" fill="' + s.color + '" d="M' + top.join('L') + 'L' + bottom.reverse().join('L') + 'Z"/>');
      }
      if (top.length === 1) top.push(top[0]);
      svg.push('<path class="series-line" stroke="' + s.color + '" data-points="' + top.length + '" d="M' + top.join('L') + '"/>');
      paths++;
      if (spec.markers) {
        sx.forEach(function (v, i) {
          if (s.hi[i] === null) return;
          svg.push('<circle r="3.5" fill="' + s.color + '" cx="' + px(v).toFixed(1) + '" cy="' + py(s.hi[i]).toFixed(1) + '"/>');
        });
      }
    });
    svg.push('<line class="cursor" x1="-10" x2="-10" y1="' + T + '" y2="' + (H - B) + '"/>');
    svg.push('</svg>');
    var legend = spec.series.map(function (s) {
      return '<span><i style="background:' + s.color + '"></i>' + esc(s.name) + '</span>';
    }).concat((spec.hlines || []).map(function (h) {
      return '<span><i style="background:' + h.color + '"></i>' + esc(h.label) + '</span>';
    }));
    holder.innerHTML = '<h3>' + esc(spec.title) + '</h3>' + svg.join('') +
        '<div class="legend">' + legend.join('') + '</div><div class="readout"></div>';
    holder.setAttribute('data-paths', String(paths));
    var svgEl = holder.querySelector('svg'), cursor = holder.querySelector('.cursor');
    var readout = holder.querySelector('.readout');
    svgEl.addEventListener('mousemove', function (ev) {
      var box = svgEl.getBoundingClientRect();
      var vx = x0 + ((ev.clientX - box.left) / box.width * W - L) / (W - L - R) * (x1 - x0);
      var parts = [];
      spec.series.forEach(function (s) {
        var sx = s.x || spec.x, best = -1;
        for (var i = 0; i < sx.length; i++) {
          if (s.hi[i] !== null && (best < 0 || Math.abs(sx[i] - vx) < Math.abs(sx[best] - vx))) best = i;
        }
        if (best < 0) return;
        var range = s.lo[best] === s.hi[best] ? '' : ' (' + num(s.lo[best], spec.percent) + '\u2013' + num(s.hi[best], spec.percent) + ')';
        parts.push(s.name + ' ' + num(s.hi[best], spec.percent) + range);
        if (parts.length === 1) {
          cursor.setAttribute('x1', px(sx[best]).toFixed(1));
          cursor.setAttribute('x2', px(sx[best]).toFixed(1));
          parts[0] = spec.xLabel + ' ' + num(sx[best]) + ': ' + parts[0];
        }
      });
      readout.textContent = parts.join(', ');
    });
    return paths;
  }

  var palette = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f'];
  var specs = [];
  if (data.kind === 'run') {
    var tl = data.timeline, xl = data.x_label;
    function fig(name, label, color, lo, hi) {
      return {name: label, color: color, lo: tl[name][lo], hi: tl[name][hi]};
    }
    specs.push({id: 'chart-used', title: 'Used blocks', xLabel: xl, yLabel: 'blocks', x: tl.x, integer: true, integerX: true,
                series: tl.in_use_blocks
                  ? [fig('used_blocks', 'used (cache residency included)', palette[0], 'min', 'max'),
                     fig('in_use_blocks', 'in use by requests', palette[5], 'min', 'max')]
                  : [fig('used_blocks', 'used blocks', palette[0], 'min', 'max')],
                hlines: data.pool_blocks ? [{y: data.pool_blocks, label: 'pool (' + data.pool_blocks + ' blocks)', color: '#8a93a3'}] : []});
    specs.push({id: 'chart-waste', title: 'Waste ratio (unfilled slots of used blocks)', xLabel: xl,
                yLabel: 'waste', percent: true, x: tl.x, integerX: true,
                series: [fig('waste_ratio', 'waste ratio', palette[1], 'min', 'max')]});
    specs.push({id: 'chart-tokens', title: 'Logical versus physical tokens', xLabel: xl, yLabel: 'tokens', x: tl.x, integer: true, integerX: true,
                series: [fig('logical_tokens', 'logical (sequence lengths)', palette[3], 'min', 'max'),
                         fig('physical_tokens', 'physical (filled slots)', palette[2], 'min', 'max')]});
    specs.push({id: 'chart-cow', title: 'Copy-on-write copies (cumulative)', xLabel: xl, yLabel: 'copies', x: tl.x, integer: true, integerX: true,
                series: [fig('cow_copies', 'COW copies', palette[4], 'last', 'last')]});
  } else if (data.kind === 'plan') {
    var groups = [], byKey = {};
    data.cells.forEach(function (c) {
      var name = c.label || c.model;
      var key = name + ', page ' + c.page_tokens;
      if (!(key in byKey)) { byKey[key] = groups.length; groups.push({name: key, model: name, page: c.page_tokens, cells: []}); }
      groups[byKey[key]].cells.push(c);
    });
    groups.forEach(function (g) { g.cells.sort(function (a, b) { return a.kv_memory_bytes - b.kv_memory_bytes; }); });
    function sweep(id, title, yLabel, value, percent, withMin) {
      var series = groups.map(function (g, i) {
        var ys = g.cells.map(value);
        return {name: g.name, color: palette[i % palette.length], x: g.cells.map(function (c) { return c.kv_memory_bytes / 1073741824; }), lo: ys, hi: ys};
      });
      var vlines = [];
      if (withMin) {
        data.min_kv_memory.forEach(function (m) {
          var i = byKey[(m.label || m.model) + ', page ' + m.page_tokens];
          if (m.kv_memory_bytes !== null && i !== undefined) vlines.push({x: m.kv_memory_bytes / 1073741824, color: palette[i % palette.length]});
        });
      }
      specs.push({id: id, title: title, xLabel: 'KV memory (GiB)', yLabel: yLabel, percent: percent,
                  markers: true, series: series, vlines: vlines});
    }
    sweep('chart-preemptions', 'Preemptions (dashed: smallest KV memory with none)', 'preemptions', function (c) { return c.preemptions; }, false, true);
    specs[specs.length - 1].integer = true;
    sweep('chart-peak', 'Peak used blocks (fraction of the pool)', 'peak / pool', function (c) { return c.pool_blocks ? c.peak_used / c.pool_blocks : null; }, true, false);
    sweep('chart-waste', 'Mean waste ratio', 'waste', function (c) { return c.waste_ratio_mean; }, true, false);
    sweep('chart-throughput', 'Output tokens per second (virtual time)', 'tokens/s', function (c) { return c.output_tokens_per_second; }, false, false);
  }
  var container = document.getElementById('charts'), drawn = 0;
  specs.forEach(function (spec) {
    var holder = document.createElement('div');
    holder.className = 'chart';
    holder.id = spec.id;
    container.appendChild(holder);
    if (drawChart(holder, spec) > 0) drawn++;
  });
  document.documentElement.setAttribute('data-drawn', String(drawn));
})();
