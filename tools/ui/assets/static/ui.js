// The web view's one script: it follows the page's stream of server-sent
// events (data-live on <body>), replaces the sections the server sends,
// and draws the machine grid from two bytes per machine (CPU allocated in
// percent, flags). No library, no build step.
(function () {
  'use strict';
  var LOST = 1, CORDONED = 2, NOTREADY = 4, EXPIRED = 8;
  var body = document.body;
  var status = document.getElementById('live-status');
  var canvas = document.getElementById('grid');
  var tip = document.getElementById('grid-tip');
  var names = [], cells = new Uint8Array(0), cell = 8, cols = 1;

  function setStatus(text, on) {
    if (!status) return;
    status.textContent = text;
    status.className = 'live ' + (on ? 'on' : 'off');
  }

  // colour of a CPU percent: from pale to deep blue.
  function shade(p) {
    var f = Math.min(p, 100) / 100;
    var r = Math.round(228 - f * 210), g = Math.round(236 - f * 150), b = Math.round(244 - f * 70);
    return 'rgb(' + r + ',' + g + ',' + b + ')';
  }

  function layout() {
    var n = names.length;
    var width = canvas.parentElement.clientWidth - 2;
    cell = Math.max(4, Math.min(28, Math.floor(Math.sqrt(width * 260 / Math.max(n, 1)))));
    // As many rows as the width needs, the machines spread evenly over them.
    var rows = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(width / cell))));
    cols = Math.max(1, Math.ceil(n / rows));
    canvas.width = cols * cell;
    canvas.height = rows * cell;
  }

  function drawSlot(ctx, i) {
    var x = (i % cols) * cell, y = Math.floor(i / cols) * cell;
    var p = cells[2 * i], f = cells[2 * i + 1];
    var gap = cell > 6 ? 1 : 0;
    ctx.clearRect(x, y, cell, cell);
    ctx.fillStyle = f & LOST ? '#2b2b2b' : (f & NOTREADY ? '#c9c9c9' : shade(p));
    ctx.fillRect(x, y, cell - gap, cell - gap);
    if (f & LOST) {
      ctx.strokeStyle = '#e5484d';
      ctx.lineWidth = Math.max(1, cell / 8);
      ctx.beginPath();
      ctx.moveTo(x + 2, y + 2); ctx.lineTo(x + cell - 3, y + cell - 3);
      ctx.moveTo(x + cell - 3, y + 2); ctx.lineTo(x + 2, y + cell - 3);
      ctx.stroke();
    }
    if (f & CORDONED) {
      ctx.strokeStyle = '#e09b00';
      ctx.lineWidth = Math.max(1, cell / 7);
      ctx.beginPath();
      ctx.moveTo(x, y + cell - gap); ctx.lineTo(x + cell - gap, y);
      ctx.stroke();
    }
    if (f & EXPIRED) {
      ctx.strokeStyle = '#d9480f';
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 0.5, cell - gap - 1, cell - gap - 1);
    }
  }

  function drawAll() {
    if (!canvas) return;
    layout();
    var ctx = canvas.getContext('2d');
    for (var i = 0; i < names.length; i++) drawSlot(ctx, i);
    canvas.dataset.machines = String(names.length);
  }

  function decode(b64) {
    var s = atob(b64), out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  function onGrid(msg) {
    if (msg.names) names = msg.names;
    if (msg.full) {
      cells = decode(msg.full);
      drawAll();
    } else if (msg.delta) {
      var ctx = canvas.getContext('2d');
      for (var j = 0; j + 2 < msg.delta.length; j += 3) {
        var i = msg.delta[j];
        cells[2 * i] = msg.delta[j + 1];
        cells[2 * i + 1] = msg.delta[j + 2];
        drawSlot(ctx, i);
      }
    }
  }

  function slotAt(ev) {
    var r = canvas.getBoundingClientRect();
    var x = Math.floor((ev.clientX - r.left) * canvas.width / r.width / cell);
    var y = Math.floor((ev.clientY - r.top) * canvas.height / r.height / cell);
    var i = y * cols + x;
    return x < cols && i >= 0 && i < names.length ? i : -1;
  }

  function describe(i) {
    var f = cells[2 * i + 1], marks = [];
    if (f & LOST) marks.push('lost');
    if (f & CORDONED) marks.push('cordoned');
    if (f & EXPIRED) marks.push('lease expired');
    if (f & NOTREADY) marks.push('not ready');
    return names[i] + ': ' + cells[2 * i] + '% CPU allocated' + (marks.length ? ' (' + marks.join(', ') + ')' : '');
  }

  if (canvas) {
    canvas.addEventListener('mousemove', function (ev) {
      var i = slotAt(ev);
      tip.textContent = i < 0 ? 'hover a machine' : describe(i);
      canvas.style.cursor = i < 0 ? 'default' : 'pointer';
    });
    canvas.addEventListener('click', function (ev) {
      var i = slotAt(ev);
      if (i >= 0) location.href = '/ui/machine/' + encodeURIComponent(names[i]);
    });
    window.addEventListener('resize', drawAll);
  }

  var live = body.dataset.live;
  if (!live || !window.EventSource) {
    setStatus('not live', false);
    return;
  }
  var es = new EventSource(live);
  es.onopen = function () { setStatus('live', true); };
  es.onerror = function () { setStatus('reconnecting…', false); };
  es.addEventListener('sections', function (ev) {
    var update = JSON.parse(ev.data);
    for (var id in update) {
      var el = document.getElementById(id);
      if (el) el.innerHTML = update[id];
    }
    body.dataset.updated = String(Date.now());
  });
  es.addEventListener('grid', function (ev) {
    if (canvas) onGrid(JSON.parse(ev.data));
  });
})();
