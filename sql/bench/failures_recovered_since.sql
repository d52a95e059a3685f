SELECT * FROM failures WHERE status = 'recovered' AND detected_at >= :a
