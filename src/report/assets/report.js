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

  // spec: {title, xLabel, yLabel, percent, integer (y), integerX, logX, x: [..], markers,
  //        series: [{name, color, lo: [..], hi: [..], x: [..] (optional), dash, width}],
  //        hlines: [{y, label, color}], vlines: [{x, label, color}]}
  // A series drawn over another with the same values stays visible: later
  // series are drawn dashed and thinner (give dash/width to choose).
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
    if (spec.logX) xs = xs.filter(function (v) { return v > 0; });
    var x0 = Math.min.apply(null, xs.concat([Infinity])), x1 = Math.max.apply(null, xs.concat([-Infinity]));
    if (!isFinite(x0)) { x0 = spec.logX ? 1 : 0; x1 = spec.logX ? 10 : 1; }
    if (x1 === x0) { if (spec.logX) { x0 /= 2; x1 *= 2; } else { x0 -= 1; x1 += 1; } }
    var y0, y1, yt;
    // Powers of ten with 2 and 5 between, within [lo, hi] (few: only the powers).
    function logTicks(lo, hi) {
      var out = [];
      for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        [1, 2, 5].forEach(function (m) { var v = m * Math.pow(10, e); if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push(v); });
      }
      if (out.length > 8) out = out.filter(function (v) { return String(v).charAt(0) === '1'; });
      return out;
    }
    var logY = spec.logY && ys.some(function (v) { return v > 0; });
    if (logY) {
      var positive = ys.filter(function (v) { return v > 0; });
      y0 = Math.pow(10, Math.floor(Math.log10(Math.min.apply(null, positive))));
      y1 = Math.pow(10, Math.ceil(Math.log10(Math.max.apply(null, positive))));
      if (y1 <= y0) y1 = y0 * 10;
      yt = logTicks(y0, y1);
    } else {
      y0 = Math.min(0, Math.min.apply(null, ys.concat([0])));
      y1 = Math.max.apply(null, ys.concat([0]));
      if (!(y1 > y0)) y1 = y0 + (spec.percent ? 0.01 : 1);
      yt = niceTicks(y0, y1, 5, !spec.percent && spec.integer);
      y1 = Math.max(y1, yt[yt.length - 1]);
    }
    var xt;
    if (spec.logX) {
      xt = logTicks(x0, x1);
    } else {
      xt = niceTicks(x0, x1, 6, spec.integerX);
    }
    function px(v) {
      if (spec.logX) {
        v = Math.max(v, x0);
        return L + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * (W - L - R);
      }
      return L + (v - x0) / (x1 - x0) * (W - L - R);
    }
    function py(v) {
      if (logY) {
        v = Math.max(v, y0);
        return T + (1 - (Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * (H - T - B);
      }
      return T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
    }
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
      if (v.label) {
        var right = px(v.x) > (L + W - R) / 2;  // past the middle: the label on its left
        svg.push('<text x="' + x + '" y="' + (T + 10) + '" dx="' + (right ? -4 : 4) + '" text-anchor="' + (right ? 'end' : 'start') + '">' + esc(v.label) + '</text>');
      }
    });
    var paths = 0;
    spec.series.forEach(function (s, index) {
      var sx = s.x || spec.x, top = [], bottom = [], band = false;
      sx.forEach(function (v, i) {
        // A log scale has no zero: such a point is left out, not drawn on the floor.
        if (s.hi[i] === null || (logY && !(s.hi[i] > 0))) return;
        top.push(px(v).toFixed(1) + ',' + py(s.hi[i]).toFixed(1));
        bottom.push(px(v).toFixed(1) + ',' + py(s.lo[i]).toFixed(1));
        if (s.lo[i] !== s.hi[i]) band = true;
      });
      if (top.length === 0) return;
      if (band) {
        svg.push('<path class="band" fill="' + s.color + '" d="M' + top.join('L') + 'L' + bottom.reverse().join('L') + 'Z"/>');
      }
      if (top.length === 1) top.push(top[0]);
      var dash = s.dash !== undefined ? s.dash : (index > 0 ? '6 3' : '');
      var width = s.width !== undefined ? s.width : (index > 0 ? 1.4 : 2.4);
      svg.push('<path class="series-line" stroke="' + s.color + '" stroke-width="' + width + '"' +
               (dash ? ' stroke-dasharray="' + dash + '"' : '') + ' data-points="' + top.length + '" d="M' + top.join('L') + '"/>');
      paths++;
      if (spec.markers) {
        sx.forEach(function (v, i) {
          if (s.hi[i] === null || (logY && !(s.hi[i] > 0))) return;
          svg.push('<circle r="' + Math.max(1.5, 4.5 - index) + '" fill="' + s.color + '" cx="' + px(v).toFixed(1) + '" cy="' + py(s.hi[i]).toFixed(1) + '"/>');
        });
      }
    });
    svg.push('<line class="cursor" x1="-10" x2="-10" y1="' + T + '" y2="' + (H - B) + '"/>');
    svg.push('</svg>');
    var legend = spec.series.map(function (s, index) {
      var dashed = s.dash !== undefined ? s.dash !== '' : index > 0;
      var none = logY && !s.hi.some(function (v) { return v > 0; });
      return '<span><i style="' + (dashed ? 'height:0;border-top:3px dashed ' + s.color : 'background:' + s.color) + '"></i>' +
             esc(s.name) + (none ? ' (0 throughout)' : '') + '</span>';
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
  // The CDF of a latency over requests, with its SLO (simulate and fleet pages).
  function cdf(id, name, title, slo) {
    var q = (data.cdf || {})[name] || [];
    var share = q.map(function (_, i) { return q.length > 1 ? i / (q.length - 1) : 1; });
    var positive = q.some(function (v) { return v > 0; });
    specs.push({id: id, title: title, xLabel: 'ms (log scale)', yLabel: 'share of requests', percent: true, logX: positive,
                series: q.length ? [{name: name.replace('_ms', '').toUpperCase(), color: palette[id === 'chart-ttft' ? 0 : 2], x: q, lo: share, hi: share}] : [],
                vlines: slo !== null && slo !== undefined ? [{x: slo, label: 'SLO ' + num(slo) + ' ms', color: '#b42318'}] : []});
  }
  if (data.kind === 'run' && data.timeline.t) {
    // simulate: every chart over virtual time; sizes in GiB.
    var st = data.timeline, gib = (data.block_bytes || 0) / 1073741824;
    function sim(name, label, color, lo, hi, scale, extra) {
      var k = scale || 1;
      function scaled(a) { return a.map(function (v) { return v === null ? null : v * k; }); }
      var out = {name: label, color: color, lo: scaled(st[name][lo]), hi: scaled(st[name][hi])};
      for (var key in (extra || {})) out[key] = extra[key];
      return out;
    }
    var vt = st.t.last, xt = 'virtual time (s)';
    specs.push({id: 'chart-memory', title: 'KV memory per GPU: in use by requests vs cached (GiB)', xLabel: xt,
                yLabel: 'GiB', x: vt,
                series: [sim('in_use_blocks', 'in use by requests', palette[0], 'min', 'max', gib),
                         sim('cached_blocks', 'cached, no request (evictable)', palette[4], 'min', 'max', gib),
                         sim('used_blocks', 'used (in use + cached)', palette[5], 'min', 'max', gib, {dash: '2 3', width: 1.2})],
                hlines: data.pool_blocks ? [{y: data.pool_blocks * gib, label: 'pool (' + num(data.pool_blocks * gib) + ' GiB, ' + data.pool_blocks + ' blocks)', color: '#8a93a3'}] : []});
    var requestSeries = [sim('running', 'running', palette[2], 'min', 'max'),
                         sim('waiting', 'waiting', palette[1], 'min', 'max')];
    if (st.loading) requestSeries.push(sim('loading', 'of them loading KV from a tier', palette[3], 'min', 'max', 1, {dash: '4 3'}));
    specs.push({id: 'chart-requests', title: 'Requests running and waiting', xLabel: xt, yLabel: 'requests', x: vt, integer: true,
                series: requestSeries});
    var tiers = (data.tiers || []).filter(function (t, k) { return st['tier' + k + '_resident']; });
    if (tiers.length) {
      // --offload: each tier's KV held against its capacity, and its blocks
      // stored and loaded so far.
      specs.push({id: 'chart-tiers', title: 'KV held in the offload tiers, per GPU (GiB)', xLabel: xt, yLabel: 'GiB', x: vt,
                  series: tiers.map(function (t, k) { return sim('tier' + k + '_resident', t.name, palette[(k * 2) % palette.length], 'min', 'max', gib, {dash: '', width: 2.4}); }),
                  hlines: tiers.map(function (t) { return {y: t.capacity_blocks * gib, label: t.name + ' capacity (' + num(t.capacity_blocks * gib) + ' GiB, ' + t.capacity_blocks + ' blocks)', color: '#8a93a3'}; })});
      var moves = [];
      // Tiers written through store the same blocks: a later tier's lines are
      // thinner and dotted, drawn over the earlier's, so both show where they meet.
      tiers.forEach(function (t, k) {
        moves.push(sim('tier' + k + '_stored', t.name + ' stored', palette[(k * 2) % palette.length], 'last', 'last', 1,
                       k === 0 ? {dash: '', width: 2.4} : {dash: '2 3', width: 1.4}));
        moves.push(sim('tier' + k + '_loaded', t.name + ' loaded back', palette[(k * 2 + 1) % palette.length], 'last', 'last', 1,
                       k === 0 ? {dash: '6 3', width: 2.4} : {dash: '2 3', width: 1.4}));
      });
      specs.push({id: 'chart-tier-moves', title: 'Offload tier transfers (blocks, cumulative; log scale)', xLabel: xt, yLabel: 'blocks', x: vt, integer: true, logY: true,
                  series: moves});
    }
    specs.push({id: 'chart-preemptions', title: 'Preemptions (cumulative)', xLabel: xt, yLabel: 'preemptions', x: vt, integer: true,
                series: [sim('preemptions', 'preemptions', palette[3], 'last', 'last')]});
    specs.push({id: 'chart-waste', title: 'Waste ratio (unfilled slots of used blocks)', xLabel: xt,
                yLabel: 'waste', percent: true, x: vt,
                series: [sim('waste_ratio', 'waste ratio', palette[1], 'min', 'max')]});
    cdf('chart-ttft', 'ttft_ms', 'Time to first token: CDF over requests', data.slo && data.slo.ttft_ms);
    cdf('chart-tpot', 'tpot_ms', 'Time per output token: CDF over requests', data.slo && data.slo.tpot_ms);
  } else if (data.kind === 'fleet') {
    // One line per instance, each over its own steps' virtual times; a
    // palette's worth of solid lines, then dashed ones.
    var xt2 = 'virtual time (s)';
    function perInstance(name, lo, hi, scale) {
      return data.instances.filter(function (inst) { return inst.timeline && inst.timeline.t; }).map(function (inst, i) {
        var tl = inst.timeline, k = scale ? scale(inst) : 1;
        function scaled(a) { return a.map(function (v) { return v === null ? null : v * k; }); }
        return {name: inst.name, color: palette[i % palette.length], x: tl.t.last, lo: scaled(tl[name][lo]), hi: scaled(tl[name][hi]),
                dash: i < palette.length ? '' : '6 3', width: 1.6};
      });
    }
    specs.push({id: 'chart-fleet-kv', title: 'KV in use by requests, share of each instance\'s pool', xLabel: xt2, yLabel: 'in use / pool', percent: true,
                series: perInstance('in_use_blocks', 'min', 'max', function (inst) { return inst.pool_blocks ? 1 / inst.pool_blocks : 0; })});
    // --offload: each tier's KV held, as a share of each instance's tier.
    ((data.instances[0] || {}).tiers || []).forEach(function (t, k) {
      if (!data.instances.some(function (inst) { return inst.timeline && inst.timeline['tier' + k + '_resident']; })) return;
      specs.push({id: 'chart-fleet-tier' + k, title: 'KV held in the ' + t.name + ' tier, share of each instance\'s', xLabel: xt2,
                  yLabel: 'held / capacity', percent: true,
                  series: perInstance('tier' + k + '_resident', 'min', 'max', function (inst) {
                    var c = inst.tiers && inst.tiers[k] ? inst.tiers[k].capacity_blocks : 0;
                    return c ? 1 / c : 0;
                  })});
    });
    specs.push({id: 'chart-fleet-waiting', title: 'Requests waiting, per instance', xLabel: xt2, yLabel: 'requests', integer: true,
                series: perInstance('waiting', 'min', 'max')});
    specs.push({id: 'chart-fleet-running', title: 'Requests running, per instance', xLabel: xt2, yLabel: 'requests', integer: true,
                series: perInstance('running', 'min', 'max')});
    specs.push({id: 'chart-fleet-preemptions', title: 'Preemptions (cumulative), per instance', xLabel: xt2, yLabel: 'preemptions', integer: true,
                series: perInstance('preemptions', 'last', 'last')});
    cdf('chart-ttft', 'ttft_ms', 'Time to first token (as the user sees it): CDF over requests', data.slo && data.slo.ttft_ms);
    cdf('chart-tpot', 'tpot_ms', 'Time per output token: CDF over requests', data.slo && data.slo.tpot_ms);
  } else if (data.kind === 'run') {
    var tl = data.timeline, xl = data.x_label;
    function fig(name, label, color, lo, hi) {
      return {name: label, color: color, lo: tl[name][lo], hi: tl[name][hi]};
    }
    specs.push({id: 'chart-used', title: 'Used blocks', xLabel: xl, yLabel: 'blocks', x: tl.x, integer: true, integerX: true,
                series: [fig('used_blocks', 'used blocks', palette[0], 'min', 'max')],
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
    // One line per model, deployment and page size.
    var groups = [], byKey = {};
    function groupName(c) {
      var name = c.label || c.model;
      return name + (c.deployment ? ' on ' + c.deployment.label : '') + ', page ' + c.page_tokens;
    }
    data.cells.forEach(function (c) {
      var key = groupName(c);
      if (!(key in byKey)) { byKey[key] = groups.length; groups.push({name: key, cells: []}); }
      groups[byKey[key]].cells.push(c);
    });
    groups.forEach(function (g) { g.cells.sort(function (a, b) { return a.kv_memory_bytes - b.kv_memory_bytes; }); });
    // The joint rule's attainment (percentile targets alone have none: the TPOT chart stays).
    var slo = data.cells.some(function (c) { return c.slo && typeof c.slo.attainment === 'number'; });
    var p99 = function (name) { return function (c) { return c.latency ? c.latency[name].p99 : null; }; };
    var attainment = function (c) { return c.slo ? c.slo.attainment : null; };
    var swept = groups.some(function (g) { return g.cells.length > 1; });  // memory swept
    function sweep(id, title, yLabel, value, percent, withMin) {
      var series = groups.map(function (g, i) {
        var ys = g.cells.map(value);
        return {name: g.name, color: palette[i % palette.length], x: g.cells.map(function (c) { return c.kv_memory_bytes / 1073741824; }), lo: ys, hi: ys};
      });
      var vlines = [];
      if (withMin) {
        data.min_kv_memory.forEach(function (m) {
          var key = (m.label || m.model) + (m.deployment ? ' on ' + m.deployment.label : '') + ', page ' + m.page_tokens;
          var i = byKey[key];
          if (m.kv_memory_bytes !== null && i !== undefined) vlines.push({x: m.kv_memory_bytes / 1073741824, color: palette[i % palette.length]});
        });
      }
      specs.push({id: id, title: title, xLabel: 'KV memory per GPU (GiB)', yLabel: yLabel, percent: percent,
                  markers: true, series: series, vlines: vlines});
    }
    if (swept || !data.deployments) {
      sweep('chart-preemptions', 'Preemptions (dashed: smallest KV memory with none)', 'preemptions', function (c) { return c.preemptions; }, false, true);
      specs[specs.length - 1].integer = true;
      sweep('chart-peak', 'Peak blocks in use (fraction of the pool)', 'in use / pool', function (c) {
        var pool = c.fleet_pool_blocks || c.pool_blocks;  // a fleet's: every instance's
        return pool ? c.peak_in_use / pool : null;
      }, true, false);
      sweep('chart-ttft', 'p99 time to first token (ms, log scale)', 'ms', p99('ttft_ms'), false, false);
      specs[specs.length - 1].logY = true;
      if (slo) sweep('chart-slo', 'SLO attainment', 'requests meeting the SLOs', attainment, true, false);
      else {
        sweep('chart-tpot', 'p99 time per output token (ms, log scale)', 'ms', p99('tpot_ms'), false, false);
        specs[specs.length - 1].logY = true;
      }
    }
    if (data.deployments && !swept) {
      // Pools sized by the GPU: against GPUs, one line per model, GPU kind and
      // page size, a point per deployment.
      // A fleet sweep: a line per router too (P/D apart), the fleets of one
      // instance (or one prefill instance), which route nothing, on each.
      var kinds = [], byKind = {}, routers = [];
      function routed(f) { return f.instances > 1 && (f.prefill === 0 || f.prefill > 1); }
      data.cells.forEach(function (c) {
        var f = c.deployment && c.deployment.fleet;
        if (f && routed(f) && routers.indexOf(f.router) < 0) routers.push(f.router);
      });
      data.cells.forEach(function (c) {
        if (!c.deployment || c.deployment.gpu === null) return;
        var f = c.deployment.fleet;
        var base = (c.label || c.model) + ' on ' + c.deployment.gpu + ', page ' + c.page_tokens;
        if (f && c.deployment.tp > 1) base += ', tp ' + c.deployment.tp;  // a replica's
        if (f && c.deployment.pp > 1) base += ', pp ' + c.deployment.pp;
        var keys = [base];
        if (f) {
          var shape = f.prefill > 0 ? ', P/D' : '';
          var names = routed(f) || !routers.length ? [f.router] : routers;
          keys = names.map(function (r) { return base + shape + ', ' + (routed(f) || routers.length ? r : 'one instance'); });
        }
        keys.forEach(function (key) {
          if (!(key in byKind)) { byKind[key] = kinds.length; kinds.push({name: key, cells: []}); }
          kinds[byKind[key]].cells.push(c);
        });
      });
      kinds.forEach(function (k) { k.cells.sort(function (a, b) { return a.deployment.gpus - b.deployment.gpus || a.deployment.tp - b.deployment.tp; }); });
      function byGpus(id, title, yLabel, value, percent) {
        specs.push({id: id, title: title, xLabel: 'GPUs', yLabel: yLabel, percent: percent, integerX: true, markers: true,
                    series: kinds.map(function (k, i) {
                      var ys = k.cells.map(value);
                      return {name: k.name, color: palette[i % palette.length], x: k.cells.map(function (c) { return c.deployment.gpus; }), lo: ys, hi: ys};
                    })});
      }
      if (kinds.length) {
        byGpus('chart-gpus-preemptions', 'Preemptions against GPUs', 'preemptions', function (c) { return c.preemptions; }, false);
        byGpus('chart-gpus-ttft', 'p99 time to first token against GPUs (ms, log scale)', 'ms', p99('ttft_ms'), false);
        specs[specs.length - 1].logY = true;
        if (slo) byGpus('chart-gpus-slo', 'SLO attainment against GPUs', 'requests meeting the SLOs', attainment, true);
        else {
          byGpus('chart-gpus-tpot', 'p99 time per output token against GPUs (ms, log scale)', 'ms', p99('tpot_ms'), false);
          specs[specs.length - 1].logY = true;
        }
        if (data.cells.some(function (c) { return c.cost_usd; })) {
          byGpus('chart-gpus-usd', '$ per million output tokens within the SLOs against GPUs (log scale)', '$ / M tokens',
                 function (c) { return c.cost_usd ? c.cost_usd.usd_per_million_output_tokens : null; }, false);
          specs[specs.length - 1].logY = true;
        }
      }
    }
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
