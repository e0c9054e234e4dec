-- Bootstrap: helpers every later migration relies on.

-- Keeps updated_at honest without every UPDATE having to remember it.
CREATE OR REPLACE FUNCTION sy_set_updated_at() RETURNS trigger AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
