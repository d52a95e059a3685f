-- What a recovery did besides restarting (a torn checkpoint's entries moved aside), added to the
-- failure's detail: the record names the files.
UPDATE failures SET detail = left(detail || '; ' || :note, 2000) WHERE id = :id
