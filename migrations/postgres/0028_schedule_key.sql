-- The name of the key that created a schedule: the agent its ticks'
-- events name, as every other event names a key. NULL for schedules made
-- before it was kept: their ticks name the creating member's email.
ALTER TABLE schedules ADD COLUMN created_by_key TEXT;
