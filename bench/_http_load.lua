-- wrk script of bench_http's load runs: POST compact or append to sessions <prefix>0 ..
-- <prefix>(n-1) in turn, counting the answers by status.
-- wrk ... -s bench/_http_load.lua <url> -- <token> <prefix> <n> <compact|append>
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  wrk.headers["Content-Type"] = "application/json"
  prefix, n, kind = args[2], tonumber(args[3]), args[4]
  at = math.random(n)
  ok, limited, unavailable, other = 0, 0, 0, 0
end

local append_body = '{"entries":[{"role":"user","content":"next step","timestamp":1},'
  .. '{"role":"assistant","content":[{"type":"text","text":"done"}],"timestamp":2}]}'

function request()
  at = at % n + 1
  local sid = prefix .. (at - 1)
  if kind == "compact" then
    return wrk.format("POST", "/v1/sessions/" .. sid .. "/compact", nil, '{"reason":"manual"}')
  end
  return wrk.format("POST", "/v1/sessions/" .. sid .. "/entries", nil, append_body)
end

function response(status, headers, body)
  if status == 200 or status == 202 then
    ok = ok + 1
  elseif status == 429 then
    limited = limited + 1
  elseif status == 503 then
    unavailable = unavailable + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local sums = {ok = 0, limited = 0, unavailable = 0, other = 0}
  for _, thread in ipairs(threads) do
    for name, _ in pairs(sums) do
      sums[name] = sums[name] + thread:get(name)
    end
  end
  io.write(string.format("RESULT %d %d %d %d %d %d %.3f %.3f\n", sums.ok, sums.limited,
    sums.unavailable, sums.other, summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout, summary.duration,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
