-- wrk script: POST one itemSale per request, each with a unique transactionId.
-- Environment: ENTRIES_URL_PATH (the entries path, e.g. /projects/p/instances/i/entries),
-- TOKEN (bearer token), ITEMS (items to spread sales over, default 100), RUN (a prefix that
-- keeps transaction ids unique across runs). Used by infra/load/one-entry.sh.
-- No response() hook: wrk then hands no response to Lua, which keeps the client's share
-- of the two cores small; wrk counts non-2xx answers itself ("Non-2xx or 3xx responses"),
-- and one-entry.sh fails the run if there are any.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  path = os.getenv("ENTRIES_URL_PATH")
  items = tonumber(os.getenv("ITEMS") or "100")
  run = os.getenv("RUN") or "wrk"
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
end

function request()
  counter = counter + 1
  local body = string.format(
    '{"entries":[{"type":"itemSale","transactionId":"%s-%d-%d","data":{"itemId":"item-%d","quantity":1,"price":49.9}}]}',
    run, tid, counter, counter % items)
  return wrk.format(nil, path, nil, body)
end
