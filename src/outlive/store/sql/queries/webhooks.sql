-- Webhooks: endpoints per owner and the outbox of their deliveries (docs/webhooks.md).

-- name: insert_webhook
INSERT INTO webhooks (id, owner_id, url, events, secret, created_at)
VALUES (:id, :owner, :url, :events, :secret, {now})

-- name: list_webhooks
SELECT id, url, events, created_at FROM webhooks WHERE owner_id = :owner ORDER BY id

-- name: get_owned_webhook
SELECT id, url, events, created_at FROM webhooks WHERE id = :id AND owner_id = :owner

-- name: delete_webhook
-- Its deliveries go with it (ON DELETE CASCADE).
DELETE FROM webhooks WHERE id = :id

-- name: enqueue_webhooks
-- One outbox row per endpoint of the owner subscribed to the event, in the transaction of
-- the change it reports; `events` is the comma-wrapped list, so the pattern is `%,name,%`.
INSERT INTO webhook_deliveries
    (webhook_id, msg_id, session_id, event, body, state, attempts, next_attempt_at, created_at)
SELECT w.id, :msg, :sid, :event, :body, 'pending', 0, {now}, {now}
FROM webhooks w WHERE w.owner_id = :owner AND w.events LIKE :pattern

-- name: list_deliveries
SELECT msg_id, session_id, event, state, attempts, last_status, last_error, last_attempt_at,
       next_attempt_at, created_at
FROM webhook_deliveries WHERE webhook_id = :id
ORDER BY created_at DESC, msg_id DESC LIMIT :limit

-- name: any_due_delivery
-- A read first, so an idle outbox costs no write transaction.
SELECT 1 AS due FROM webhook_deliveries
WHERE state = 'pending' AND next_attempt_at <= {now} LIMIT 1

-- name: due_deliveries
-- Pending deliveries whose time has come: new ones, retries, and those whose taker's lease
-- ran out (a worker that died mid-delivery).
SELECT webhook_id, msg_id FROM webhook_deliveries
WHERE state = 'pending' AND next_attempt_at <= {now}
ORDER BY next_attempt_at LIMIT :limit {skip_locked}

-- name: take_delivery
-- Taking a delivery counts the attempt and pushes its time past the lease: if the taker
-- dies, it is due again then, with the same msg_id.
UPDATE webhook_deliveries
SET attempts = attempts + 1, last_attempt_at = {now}, next_attempt_at = {now} + {secs(:lease)}
WHERE webhook_id = :wid AND msg_id = :msg

-- name: taken_delivery
-- With the trace context of the session's last run, which the delivery continues (none once
-- the session is gone).
SELECT d.webhook_id, d.msg_id, d.body, d.attempts, w.url, w.secret,
       s.run_traceparent AS traceparent
FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
LEFT JOIN sessions s ON s.id = d.session_id
WHERE d.webhook_id = :wid AND d.msg_id = :msg

-- name: delivery_retry
-- Fenced by the attempt number: a taker whose lease ran out and was overtaken changes nothing.
UPDATE webhook_deliveries
SET last_status = :status, last_error = :error, next_attempt_at = {now} + {secs(:delay)}
WHERE webhook_id = :wid AND msg_id = :msg AND attempts = :attempt AND state = 'pending'

-- name: delivery_final
UPDATE webhook_deliveries
SET state = :outcome, last_status = :status, last_error = :error, next_attempt_at = NULL
WHERE webhook_id = :wid AND msg_id = :msg AND attempts = :attempt AND state = 'pending'

-- name: purge_webhook_deliveries
DELETE FROM webhook_deliveries WHERE session_id {in_ids}

-- name: webhook_secrets_page
-- The stored secrets in id order, a page after `:after_id`: sealing and rotation walk them in
-- bounded batches (docs/security.md).
SELECT id, secret FROM webhooks WHERE id > :after_id ORDER BY id LIMIT :limit

-- name: reseal_webhook_secret
-- Only if the row still holds what was read: a rotation and a start racing on one row, or a
-- delete in between, change nothing twice.
UPDATE webhooks SET secret = :secret WHERE id = :id AND secret = :old
