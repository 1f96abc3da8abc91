// The status page; see status_page.h.
#include "status_page.h"

namespace trainscope::sidecar {

std::string_view StatusPageHtml() {
  static constexpr std::string_view kHtml = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>trainscope sidecar</title>
<style>
 body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
 header{background:#1d2330;color:#fff;padding:12px 20px;display:flex;gap:16px;align-items:baseline}
 header h1{font-size:18px;margin:0} header .sub{opacity:.75}
 main{padding:16px 20px}
 .summary{display:flex;gap:10px;flex-wrap:wrap;margin-bottom:14px}
 .chip{padding:6px 12px;border-radius:14px;background:#fff;border:1px solid #d8dce3;font-weight:600}
 .banner{padding:10px 14px;border-radius:6px;margin-bottom:14px;font-weight:600}
 .banner.ok{background:#e3f6e8;color:#135c2a} .banner.bad{background:#fde8e8;color:#8a1c1c}
 table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #d8dce3}
 th,td{text-align:left;padding:7px 10px;border-bottom:1px solid #eceef2;vertical-align:top}
 th{background:#eef0f4;font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:#4a5366}
 td.reason{max-width:620px;word-break:break-word}
 .st{display:inline-block;min-width:84px;text-align:center;padding:2px 8px;border-radius:10px;font-weight:700;color:#fff}
 .up{background:#2e9d4f}.slow{background:#c98a00}.stalled{background:#c96a00}.blocked{background:#d05a00}
 .missing{background:#7a6f8f}.unreachable{background:#6b4fa8}.hung{background:#c0392b}.dead{background:#7d1010}.done{background:#4a7fa8}
 .muted{color:#6b7385;font-size:12px} .err{color:#8a1c1c}
 h2{font-size:16px;margin:22px 0 8px} h2 .muted{font-weight:400}
 code.tid{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#eef0f4;padding:2px 5px;border-radius:4px;color:#1d2330}
 td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
 .bar{display:flex;height:8px;width:140px;border-radius:3px;overflow:hidden;background:#eceef2;margin-top:3px}
 .node-alive{background:#2e9d4f}.node-suspect{background:#c98a00}.node-silent,.node-isolated{background:#c0392b}.node-down{background:#7d1010}.node-left{background:#4a7fa8}
 .bar .net{background:#7a8bb0}.bar .queue{background:#d05a00}.bar .work{background:#2e9d4f}
</style></head><body>
<header><h1>trainscope</h1><span class="sub" id="cluster">cluster ?</span><span class="sub" id="updated"></span></header>
<main>
<div id="banner" class="banner">loading&hellip;</div>
<div class="summary" id="summary"></div>
<table><thead><tr><th>task</th><th>state</th><th>since</th><th>reason</th><th>waiting on</th><th>address</th><th>host / pid</th><th>steps</th><th>last answer</th></tr></thead>
<tbody id="rows"></tbody></table>
<div id="partitions-section" hidden><h2>Partitions <span class="muted">(both tasks alive, one cannot reach the other)</span></h2>
<table><thead><tr><th>task</th><th>cannot reach</th><th>for</th><th>last error</th></tr></thead>
<tbody id="partitions"></tbody></table></div>
<h2>Nodes <span class="muted" id="nodesub"></span></h2>
<table><thead><tr><th>node</th><th>status</th><th>since</th><th>tasks</th><th>reason</th></tr></thead>
<tbody id="nodes"></tbody></table>
<h2>Slow ps requests <span class="muted" id="slowsub"></span></h2>
<table><thead><tr><th>trace id</th><th>method</th><th>worker &rarr; ps</th><th>total</th><th>network</th><th>queue</th><th>apply / read</th><th>where the time went</th><th>status</th><th>when</th></tr></thead>
<tbody id="slow"></tbody></table>
<h2>Failed ps requests <span class="muted">(errors and deadlines exceeded, newest first)</span></h2>
<table><thead><tr><th>trace id</th><th>method</th><th>worker &rarr; ps</th><th>total</th><th>status</th><th>error</th><th>when</th></tr></thead>
<tbody id="errors"></tbody></table>
<p class="muted">Refreshes every second from <a href="/api/v1/tasks">/api/v1/tasks</a>, <a href="/api/v1/traces/slow">/api/v1/traces/slow</a> and <a href="/api/v1/traces/errors">/api/v1/traces/errors</a>; a trace id opens the spans kept for it (look it up in Tempo or Jaeger when spans are forwarded). Also: <a href="/metrics">/metrics</a>, <a href="/api/v1/sd">/api/v1/sd</a>.</p>
</main>
<script>
const severity={done:-1,up:0,slow:1,stalled:2,blocked:3,missing:4,unreachable:5,hung:6,dead:7};
function esc(s){return String(s==null?'':s).replace(/[&<>"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));}
function ago(t){if(!t)return '';let s=Math.max(0,Date.now()/1000-t);if(s<60)return Math.round(s)+' s ago';if(s<3600)return Math.floor(s/60)+' min ago';return (s/3600).toFixed(1)+' h ago';}
function ms(s){return s<0?'never':(s<1?Math.round(s*1000)+' ms ago':s.toFixed(1)+' s ago');}
async function refresh(){
 try{
  const r=await fetch('/api/v1/tasks',{cache:'no-store'});
  const d=await r.json(); const tasks=d.tasks||[];
  tasks.sort((a,b)=>(severity[b.state]-severity[a.state])||a.role.localeCompare(b.role)||a.task-b.task);
  document.getElementById('cluster').textContent='cluster '+d.cluster;
  document.getElementById('updated').textContent='updated '+new Date().toLocaleTimeString();
  const counts={};tasks.forEach(t=>counts[t.state]=(counts[t.state]||0)+1);
  document.getElementById('summary').innerHTML=Object.keys(severity).filter(s=>counts[s]).sort((a,b)=>severity[b]-severity[a])
    .map(s=>`<span class="chip"><span class="st ${s}">${s}</span> ${counts[s]}</span>`).join('');
  const bad=tasks.filter(t=>t.state!=='up'&&t.state!=='done');
  const done=tasks.filter(t=>t.state==='done').length;
  const b=document.getElementById('banner');
  b.className='banner '+(bad.length||d.isolated?'bad':'ok');
  b.textContent=d.isolated?`THIS NODE (${d.node}) IS CUT OFF from every other node: what it shows of other nodes is what it last heard`
   :bad.length?`${bad.length} of ${tasks.length} tasks need attention`
   :(done===tasks.length&&done?`all ${tasks.length} tasks finished training`
   :done?`all ${tasks.length} tasks up or done (${done} finished)`:`all ${tasks.length} tasks up`);
  // A stuck task's snapshot (where every thread waits), or a fresh one of a running task.
  const stacks=t=>{const n=encodeURIComponent(t.role+':'+t.task);
   const stuck=['hung','stalled','blocked'].includes(t.state);
   if(!stuck&&!['up','slow','dead'].includes(t.state))return '';
   const fresh=(t.state==='up'||t.state==='slow')?'&fresh=1':'';
   const words=stuck?'where it is stuck':fresh?'stacks now':'last snapshots';
   return `<div><a href="/api/v1/stacks?task=${n}&format=text${fresh}" target="_blank">${words}</a></div>`;};
  document.getElementById('rows').innerHTML=tasks.map(t=>`<tr>
   <td><b>${esc(t.role)}:${esc(t.task)}</b>${t.source?`<div class="muted">via ${esc(t.source)}</div>`:''}${stacks(t)}</td>
   <td><span class="st ${esc(t.state)}">${esc(t.state)}</span></td>
   <td class="muted">${ago(t.since)}</td>
   <td class="reason">${esc(t.reason)}</td>
   <td>${(t.waiting_on||[]).map(esc).join(', ')}</td>
   <td>${esc(t.address)}</td>
   <td class="muted">${esc(t.hostname||'')}${t.pid?' / '+esc(t.pid):''}${t.restarts?`<div>restarts ${esc(t.restarts)}</div>`:''}</td>
   <td>${t.steps||''}</td>
   <td class="muted">${ms(t.heartbeat_age_seconds)}</td></tr>`).join('');
  nodes(d);
 }catch(e){const b=document.getElementById('banner');b.className='banner bad';b.textContent='cannot reach the sidecar: '+e;}
}
function since(t){return t?ago(t).replace(' ago',''):'';}
function nodes(d){
 const parts=d.partitions||[];
 document.getElementById('partitions-section').hidden=!parts.length;
 document.getElementById('partitions').innerHTML=parts.map(p=>`<tr>
  <td><b>${esc(p.a)}</b><div class="muted">${esc(p.a_node)} ${esc(p.a_address)}</div></td>
  <td><b>${esc(p.b)}</b><div class="muted">${esc(p.b_node)} ${esc(p.b_address)}</div></td>
  <td>${since(p.since)}</td>
  <td class="reason">${esc(p.error)}${p.nodes_cut?'<div class="muted">the two nodes\' sidecars cannot reach each other either</div>':''}</td></tr>`).join('');
 const ns=d.nodes||[];
 document.getElementById('nodesub').textContent=`(${ns.length} sidecars; this one is ${d.node||'?'})`;
 document.getElementById('nodes').innerHTML=ns.map(n=>`<tr>
  <td><b>${esc(n.node)}</b>${n.node===d.node?' <span class="muted">(this node)</span>':''}<div class="muted">${esc(n.hostname)}</div></td>
  <td><span class="st node-${esc(n.status)}">${esc(n.status)}</span></td>
  <td class="muted">${ago(n.since)}</td>
  <td>${(n.tasks||[]).map(esc).join(', ')}</td>
  <td class="reason">${esc(n.reason)}</td></tr>`).join('');
}
function numt(v){return v==null?'?':(v<10?v.toFixed(1):Math.round(v))+' ms';}
function num(v){return v==null?'<span class="muted">?</span>':(v<10?v.toFixed(1):Math.round(v))+' ms';}
function short(m){return esc(String(m||'').split('/').pop());}
function tid(id){return `<a href="/api/v1/traces/${esc(id)}"><code class="tid">${esc(id)}</code></a>`;}
function bar(r){const t=r.duration_ms||0;if(!t)return '';const pc=v=>v==null?0:Math.max(0,Math.min(100,100*v/t));
 const work=(r.apply_ms||0)+(r.read_ms||0);
 return `<div class="bar" title="network ${numt(r.network_ms)}, queue ${numt(r.queue_ms)}, apply/read ${numt(work)}"><span class="net" style="width:${pc(r.network_ms)}%"></span><span class="queue" style="width:${pc(r.queue_ms)}%"></span><span class="work" style="width:${pc(work)}%"></span></div>`;}
async function traces(){
 try{
  const s=await (await fetch('/api/v1/traces/slow?limit=20',{cache:'no-store'})).json();
  document.getElementById('slowsub').textContent=`(slowest ${s.per_key} per method and ps over the last ${s.window_s} s)`;
  const rows=s.requests||[];
  document.getElementById('slow').innerHTML=rows.length?rows.map(r=>`<tr>
   <td>${tid(r.trace_id)}</td><td>${short(r.method)}</td><td>${esc(r.worker||'?')} &rarr; ${esc(r.ps||'?')}</td>
   <td class="num"><b>${num(r.duration_ms)}</b></td><td class="num">${num(r.network_ms)}</td><td class="num">${num(r.queue_ms)}</td>
   <td class="num">${r.read_ms!=null?num(r.read_ms)+' read':num(r.apply_ms)}</td><td>${bar(r)}</td>
   <td class="${r.status==='OK'?'':'err'}">${esc(r.status)}</td><td class="muted">${ago(r.start_unix)}</td></tr>`).join('')
   :'<tr><td colspan="10" class="muted">no ps requests traced yet (tasks send OTLP spans to this sidecar\'s gRPC port)</td></tr>';
  const e=await (await fetch('/api/v1/traces/errors?limit=10',{cache:'no-store'})).json();
  const errs=e.requests||[];
  document.getElementById('errors').innerHTML=errs.length?errs.map(r=>`<tr>
   <td>${tid(r.trace_id)}</td><td>${short(r.method)}</td><td>${esc(r.worker||'?')} &rarr; ${esc(r.ps||'?')}</td>
   <td class="num">${num(r.duration_ms)}</td><td class="err">${esc(r.status)}</td><td class="reason">${esc(r.error)}</td>
   <td class="muted">${ago(r.start_unix)}</td></tr>`).join('')
   :'<tr><td colspan="7" class="muted">none</td></tr>';
 }catch(err){}
}
refresh();traces();setInterval(()=>{refresh();traces();},1000);
</script></body></html>
)HTML";
  return kHtml;
}

}  // namespace trainscope::sidecar
